"""The bottom of the import graph: what any folder may need and that knows nothing of minisgl's
others (it imports none of them). Environment variables (`env`), the allowed values of settings
(`choices`), logging, free ports (`net`), worker processes and tying a child's life to its
parent's (`process`), heartbeats (`liveness`) and keeping start-up objects out of the garbage
collector (`gc_freeze`)."""
