"""Jobs on a Ray cluster (`claw run --executor ray`): the connection, the work sent to
workers, and what the whole cluster shares (concurrency slots, breakers, budgets, the call
cache) in one actor on the coordinator's machine. Ray is an optional extra
(`pip install 'claw-batch[ray]'`), imported only here and only when a run asks for it."""
