package riverschema

import "fmt"

// River's notification topics. A topic's channel is "<schema>.<topic>"
// (Channel, InsertChannelSQL, LeadershipChannelSQL): River qualifies it
// with the schema of its client, so that clients of different schemas in
// one database do not wake each other.
const (
	// InsertTopic is the topic of River's insert notification: a client
	// that inserts an available job sends InsertPayload of its queue, and
	// the producers of that queue that listen fetch at once.
	InsertTopic = "river_insert"
	// LeadershipTopic is the topic of River's leadership messages: a leader
	// that resigns (on stop) sends a LeadershipNotification with action
	// ActionResigned, and followers bid at once instead of at their next
	// election tick.
	LeadershipTopic = "river_leadership"
	// ControlTopic is the topic of River's queue control messages: a client
	// that pauses or resumes a queue (QueuePause, QueueResume) sends a
	// ControlNotification with action ActionPause or ActionResume in the
	// same transaction as its update of the queue's river_queue row, and
	// the producers of that queue that listen apply it at once (River also
	// cancels running jobs through it, with action "cancel" and a job_id).
	// A producer whose LISTEN connection was down when it was sent learns
	// of the change only from its poll of river_queue, every minute.
	ControlTopic = "river_control"
)

// ActionResigned is the action of the leadership message a resigning
// leader sends on LeadershipTopic.
const ActionResigned = "resigned"

// ActionPause and ActionResume are the actions of the control messages
// River's QueuePause and QueueResume send on ControlTopic.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
)

// InsertNotification is the JSON payload of an insert notification, as
// River's producer decodes it.
type InsertNotification struct {
	Queue string `json:"queue"`
}

// LeadershipNotification is the JSON payload of a leadership message, as
// River's elector decodes it.
type LeadershipNotification struct {
	Action   string `json:"action"`
	LeaderID string `json:"leader_id"`
}

// ControlNotification is the JSON payload of a queue's pause or resume
// message, as River's producer decodes it (River's payload has further
// fields, job_id and metadata, for its other actions; they are omitted
// from a pause or resume). Queue "*" is every queue.
type ControlNotification struct {
	Action string `json:"action"`
	Queue  string `json:"queue"`
}

// Channel is the notification channel of topic for schema.
func Channel(schema, topic string) string { return schema + "." + topic }

// InsertChannelSQL, LeadershipChannelSQL and ControlChannelSQL are the SQL
// expressions of InsertTopic's, LeadershipTopic's and ControlTopic's
// channels for the connection's current schema (which tierq's pools set as
// search_path).
const (
	InsertChannelSQL     = "current_schema() || '." + InsertTopic + "'"
	LeadershipChannelSQL = "current_schema() || '." + LeadershipTopic + "'"
	ControlChannelSQL    = "current_schema() || '." + ControlTopic + "'"
)

// InsertPayload is the insert notification payload for queue, byte for
// byte as River's client sends it: PostgreSQL delivers equal
// notifications sent in one transaction once, so one sent with this
// payload and River's own for the same queue wake its producers once.
func InsertPayload(queue string) string { return fmt.Sprintf(`{"queue": %q}`, queue) }

// NotifyInsertSQL is the SQL expression that sends River's insert
// notification for the queue named by the SQL text expression queue,
// on the current schema's channel. Its payload is JSON equal to
// InsertPayload's, though not byte for byte.
func NotifyInsertSQL(queue string) string {
	return "pg_notify(" + InsertChannelSQL + ", json_build_object('queue', " + queue + ")::text)"
}

// NotifyResignedSQL is the SQL expression that sends River's leadership
// message that the leader of the river_leader row in scope (its leader_id
// column) resigned, on the current schema's channel. Its payload is JSON
// equal to the one River's resigning leader sends.
const NotifyResignedSQL = "pg_notify(" + LeadershipChannelSQL +
	", json_build_object('action', '" + ActionResigned + "', 'leader_id', " + LeaderID + ")::text)"

// NotifyPauseSQL is the SQL expression that sends River's pause message
// for the queue named by the SQL text expression queue, on the current
// schema's channel: what River's QueuePause sends after it set the
// queue's paused_at. Its payload is JSON equal to River's. Producers that
// are paused already ignore it, so sending it again changes nothing but
// the producers that missed it. Like every NOTIFY it is delivered when
// its transaction commits, and not at all if it rolls back.
func NotifyPauseSQL(queue string) string {
	return "pg_notify(" + ControlChannelSQL + ", json_build_object('action', '" + ActionPause + "', 'queue', " + queue + ")::text)"
}
