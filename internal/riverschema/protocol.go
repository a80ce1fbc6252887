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
)

// ActionResigned is the action of the leadership message a resigning
// leader sends on LeadershipTopic.
const ActionResigned = "resigned"

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

// Channel is the notification channel of topic for schema.
func Channel(schema, topic string) string { return schema + "." + topic }

// InsertChannelSQL and LeadershipChannelSQL are the SQL expressions of
// InsertTopic's and LeadershipTopic's channels for the connection's current
// schema (which tierq's pools set as search_path).
const (
	InsertChannelSQL     = "current_schema() || '." + InsertTopic + "'"
	LeadershipChannelSQL = "current_schema() || '." + LeadershipTopic + "'"
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
