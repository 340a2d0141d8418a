-- Fencing: the lease's epoch grows each time another holder takes it over. A holder writes
-- only in transactions that first confirm the epoch it took is still the lease's (see
-- reconcile::lease::Lease::fence), so a holder paused past its lease cannot write after it.
ALTER TABLE leases ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
