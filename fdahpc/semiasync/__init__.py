"""Semi-asynchronous federated learning on a rank-0 coordinator (``--mode semiasync``).

    mpirun -n 4 python -m fdahpc.train --mode semiasync --clients 100 --buffer 10 \\
        --strategy fedqs-avg --rounds 400 --partition dirichlet:0.5 --speed-ratio 50

:mod:`.mode` is the mode itself: its options, and the job that puts the roles below on the
ranks (the run around it is :mod:`fdahpc.run`'s). Rank 0 is the server (:mod:`.server`);
ranks 1..R-1 host the N clients between them, client i on rank ``1 + i mod (R-1)``
(:mod:`.client`). They meet only through the
messages of :mod:`.protocol`, ordered by the virtual clock of :mod:`.clock`; the rules of
:mod:`.rules` and FedQS's client logic in :mod:`.fedqs` are pure math.

``--checkpoint-dir``/``--resume`` work as in the synchronous mode (:mod:`fdahpc.checkpoint`):
a checkpoint every ``--checkpoint-every`` rounds, at the end and on SIGTERM/SIGUSR1 (seen by
the server after each round), written by all ranks once the hosts are quiescent (see
:mod:`.server`); a resumed run continues bit for bit like an uninterrupted one. A NaN or
Inf in an update or the global model ends every rank with exit code 3.
"""
