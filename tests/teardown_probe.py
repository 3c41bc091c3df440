"""A test helper, run under a launcher: ``python -m fdahpc.train``'s main with the given flags,
then the names of the threads this process still has, as one line."""

import os
import sys

from fdahpc.train import main

code = main(sys.argv[1:])
names = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
# One write of one short line: two ranks share the launcher's pipe, and under `python -u` a
# print of several pieces interleaves with the other rank's (seen under load).
os.write(1, f"threads after teardown: {' '.join(names)}\n".encode())
sys.exit(code)
