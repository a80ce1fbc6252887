package riverschema

// River's tables that tierq's SQL uses.
const (
	// JobTable is River's job table: one row per job, in every state.
	JobTable = "river_job"
	// QueueTable is River's queue table: one row per queue a client has
	// served; its paused_at (QueuePausedAt) marks a paused queue.
	QueueTable = "river_queue"
	// LeaderTable is River's leadership table: at most one row, the
	// elected client and its lease.
	LeaderTable = "river_leader"
	// MigrationTable records the River migrations applied, per line.
	MigrationTable = "river_migration"
)

// Columns of JobTable that tierq's SQL uses.
const (
	JobID           = "id"
	JobArgs         = "args"
	JobAttempt      = "attempt"
	JobAttemptedAt  = "attempted_at"
	JobAttemptedBy  = "attempted_by"
	JobCreatedAt    = "created_at"
	JobErrors       = "errors"
	JobFinalizedAt  = "finalized_at"
	JobKind         = "kind"
	JobMaxAttempts  = "max_attempts"
	JobMetadata     = "metadata"
	JobPriority     = "priority"
	JobQueue        = "queue"
	JobScheduledAt  = "scheduled_at"
	JobState        = "state"
	JobTags         = "tags"
	JobUniqueKey    = "unique_key"
	JobUniqueStates = "unique_states"
)

// Columns of QueueTable, LeaderTable and MigrationTable that tierq's SQL
// uses.
const (
	QueueName       = "name"
	QueuePausedAt   = "paused_at"
	LeaderID        = "leader_id"
	LeaderElectedAt = "elected_at"
	LeaderExpiresAt = "expires_at"
	MigrationLine   = "line"
	MigrationVer    = "version"
)

// MainLine is the line (MigrationTable's MigrationLine column) of River's
// own migrations, the ones rivermigrate applies by default. Before River's
// migration 5 added the column, every row was of this line.
const MainLine = "main"

// StateType is the enum type of JobTable's state column.
const StateType = "river_job_state"

// The values of StateType, as River's rivertype.JobState spells them.
const (
	StateAvailable = "available"
	StateCancelled = "cancelled"
	StateCompleted = "completed"
	StateDiscarded = "discarded"
	StatePending   = "pending"
	StateRetryable = "retryable"
	StateRunning   = "running"
	StateScheduled = "scheduled"
)

// River's indexes on JobTable that tierq relies on (for its plans, or for
// the constraint name of a unique violation).
const (
	// PrioritizedFetchingIndex is River's fetch index, (state, queue,
	// priority, scheduled_at, id): tierq's reads of available and running
	// jobs of a queue use it.
	PrioritizedFetchingIndex = "river_job_prioritized_fetching_index"
	// StateAndFinalizedAtIndex is River's index on (state, finalized_at)
	// for finalized jobs.
	StateAndFinalizedAtIndex = "river_job_state_and_finalized_at_index"
	// UniqueIndex is River's unique index on unique_key over the jobs
	// whose state is in their unique_states. An insert or update it
	// refuses fails with SQLSTATE 23505 and this constraint name.
	UniqueIndex = "river_job_unique_idx"
)

// StateInBitmaskFunc is River's SQL function
// river_job_state_in_bitmask(bitmask bit, state river_job_state) boolean:
// whether state is in a unique_states bitmask. A river_job row holds its
// unique key when its unique_states is not null and
// river_job_state_in_bitmask(unique_states, state): UniqueIndex's
// predicate, so a second such row with the same unique_key is refused.
const StateInBitmaskFunc = "river_job_state_in_bitmask"
