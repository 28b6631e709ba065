"""The master's transaction log: SQLite through sqlite-utils (ARCHITECTURE.md, "Where state
lives")."""

from master_service.txlog.log import (
    Backup,
    LoggedTransaction,
    State,
    SyncEntry,
    TxLog,
    TxLogError,
    WorkerRow,
)

__all__ = ["Backup", "LoggedTransaction", "State", "SyncEntry", "TxLog", "TxLogError", "WorkerRow"]
