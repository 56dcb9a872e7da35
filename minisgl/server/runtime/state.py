"""What the API process knows of its own health: the supervisor writes it, the probes read it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ServerState:
    """What the probes report; the supervisor (and launch, at start) update it."""

    ready: bool = False  # model loaded, every worker started
    draining: bool = False  # SIGTERM received: finishing in-flight requests
    failed: str | None = None  # why no more work can be done (a worker died): everything gets 503
    stalled: tuple[str, ...] = ()  # workers silent past --watchdog-timeout (hung: stopped, deadlocked, a stuck step)
    created: int = 0
    # Open HTTP connections (runtime/connections.py counts them, closing the longest idle beyond
    # --max-connections) and API requests in progress (http.middleware.ConnectionCap counts and caps them).
    connections: int = 0
    requests_in_progress: int = 0

    @property
    def healthy(self) -> bool:
        """What /health says: every worker alive and turning."""
        return self.failed is None and not self.stalled

    @property
    def can_serve(self) -> bool:
        """What /ready says (and minisgl_server_ready, for the alert rules)."""
        return self.ready and self.healthy and not self.draining


@dataclass
class LoraAdapters:
    """The LoRA adapters the API answers to: --lora-modules at start, then as loaded and unloaded
    while serving (http/lora.py)."""

    served: dict[str, str] = field(default_factory=dict)  # name -> path
    loading: set[str] = field(default_factory=set)  # a runtime load under way: not served yet
