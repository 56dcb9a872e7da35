"""What the benchmarks (the repository's benchmark/ folder) and the server tests share: the
offline workload and its engine flags, the online benchmark's arrivals, client and statistics,
results files, memory-bandwidth floors, and `server_process`, a server started as a child that
never outlives its starter. Nothing in minisgl's serving path imports it."""
