"""The barrier protocol's per-process machinery, built over one `Database` in the app's lifespan and injected.

`Database` (db/database.py) is the connection pool and nothing domain-specific. What the protocol adds on top of
it lives here: the coalesced barrier allocator, the coalesced gathers and compare-and-set writes, the coalesced
token lookups, the LISTEN connection freshness-bounded reads wait on, the notifier that wakes them, and the commit
hints a `next` leaves for its commit. Each is per server process (several processes share one database; the
database orders them), so each process builds one `Runtime`; a CLI command or a test builds its own.
"""

from __future__ import annotations

from metaservice.db.coalescer import Coalescer
from metaservice.db.database import Database
from metaservice.db.listener import ChangeListener, ChangeNotifier
from metaservice.domain.world import Writes
from metaservice.repositories import protocol
from metaservice.repositories import tokens as token_rows
from metaservice.repositories.allocator import Allocator
from metaservice.services.commit_hints import CommitHints
from metaservice.services.single_flight import SingleFlight
from metaservice.settings import Settings


class Runtime:
    """One server process's protocol machinery over `database` (opened by the caller; closed by the caller after
    `close()`)."""

    def __init__(self, database: Database) -> None:
        self.database = database
        # Wakes the freshness waiters of every process after a write that may complete a version (off the writer's
        # connection: a NOTIFY in the write would take PostgreSQL's database-wide notify lock at every commit).
        self.notifier = ChangeNotifier(database)
        self.allocator = Allocator(database, self.notifier)
        # The gathers and writes, each kind coalesced on its own connection (db/coalescer.py). Writes skip jobs
        # another transaction holds locked ("locked": the step stores that plan alone, waiting).
        self.gathers: Coalescer[protocol.GatherRequest, protocol.Gathered] = Coalescer(
            database, protocol.gather_many, name="metaservice-gathers", writes=False
        )
        self.writes: Coalescer[Writes, protocol.Stored] = Coalescer(
            database, protocol.apply_batch, name="metaservice-writes", writes=True, keys=lambda plan: plan.expect
        )
        # With auth on, every request looks its bearer token up: concurrent lookups share a statement too.
        self.tokens: Coalescer[str, token_rows.TokenRow | None] = Coalescer(
            database, token_rows.find_active_many, name="metaservice-tokens", writes=False
        )
        # Freshness-bounded reads wait on it; re-checks after a wake-up take at most a quarter of the pool.
        self.listener = ChangeListener(database, max_rechecks=max(1, database.settings.pool_size // 4))
        self.commit_hints = CommitHints()  # what each `next` that handed out a barrier leaves for its commit
        # Reads that settle the same idle writer at once share one settle (services/single_flight.py).
        self.settles: SingleFlight[str, bool] = SingleFlight()

    @property
    def settings(self) -> Settings:
        return self.database.settings

    async def close(self) -> None:
        """Stop everything this runtime started (waiters answer first), leaving the pool open for the caller."""
        await self.listener.close()
        await self.notifier.close()
        await self.allocator.close()
        await self.gathers.close()
        await self.writes.close()
        await self.tokens.close()
