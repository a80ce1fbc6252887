package service

// The record of the services in the database (table tierq_services,
// migration 00011): what tools that do not link an application's code know
// of its services.

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/tierq/tierq/internal/db"
)

// Recorded is a service as a process recorded it in the database
// (Registry.Record): enough to route, move, replay and watch its jobs, and
// to check a kind's args, without the service's code.
type Recorded struct {
	// Name is the service's name.
	Name string `json:"name"`
	// BaseQueue is the prefix of its queues.
	BaseQueue string `json:"base_queue"`
	// Queues are its three queues: priority, default, scheduled.
	Queues []string `json:"queues"`
	// Kinds are its kinds (not its periodic kinds, which the scheduler
	// works in its own queue).
	Kinds []RecordedKind `json:"kinds"`
	// RecordedBy is the process that recorded it last ("worker",
	// "scheduler", "api"), empty for a record made by Registry.Recorded.
	RecordedBy string `json:"recorded_by,omitempty"`
	// FirstSeenAt and SeenAt are when a process recorded the service first
	// and last; zero for a record made by Registry.Recorded.
	FirstSeenAt time.Time `json:"first_seen_at,omitzero"`
	SeenAt      time.Time `json:"seen_at,omitzero"`
}

// RecordedKind is one kind of a Recorded service.
type RecordedKind struct {
	// Name is the kind's name.
	Name string `json:"name"`
	// Aliases are its args' KindAliases.
	Aliases []string `json:"aliases"`
	// Fields are the JSON field names of its args type, sorted (Kind.ArgsFields);
	// nil when the args type is not a struct, which takes any JSON object.
	Fields []string `json:"fields"`
	// MaxAttempts is the kind's declared attempts (Kind.MaxAttempts), 0
	// when it declares none, or when a build of tierq before the field
	// recorded the kind: the inserting process's default applies.
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// Recorded are the registry's services as Record writes them, in the
// registry's order.
func (r *Registry) Recorded() []Recorded {
	out := make([]Recorded, 0, len(r.services))
	for _, s := range r.services {
		rec := Recorded{Name: s.Name(), BaseQueue: s.BaseQueue(), Queues: s.Queues(), Kinds: []RecordedKind{}}
		for _, k := range s.Kinds() {
			kind := RecordedKind{Name: k.Name(), Aliases: append([]string{}, k.FetchedNames()[1:]...), MaxAttempts: k.MaxAttempts()}
			if t := k.ArgsType(); t != nil && (t.Kind() == reflect.Struct || t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct) {
				kind.Fields = append([]string{}, k.ArgsFields()...)
			}
			rec.Kinds = append(rec.Kinds, kind)
		}
		out = append(out, rec)
	}
	return out
}

// recordSQL upserts the services of $1 (a JSON array of Recorded) in name
// order, so that processes starting at once lock the rows in the same
// order and never deadlock; a service already recorded gets the new
// description and seen_at now. By primary key: a handful of rows.
const recordSQL = `
INSERT INTO tierq_services AS s (name, base_queue, queues, kinds, recorded_by)
SELECT r.name, r.base_queue, ARRAY(SELECT jsonb_array_elements_text(r.queues)), r.kinds, $2
FROM jsonb_to_recordset($1::jsonb) AS r(name text, base_queue text, queues jsonb, kinds jsonb)
ORDER BY r.name
ON CONFLICT (name) DO UPDATE
SET base_queue = excluded.base_queue, queues = excluded.queues, kinds = excluded.kinds,
    recorded_by = excluded.recorded_by, seen_at = now()`

// Record writes the registry's services (Recorded) to the database's table
// tierq_services (migration 00011), by recordedBy (the process: "worker",
// "scheduler", "api"): a service not recorded yet is added, one recorded
// already is described anew and its seen_at set to now. It is one
// statement, idempotent; worker.Run, scheduler.Run and api.Run call it when
// they start, so that the stock tierctl knows every service a process of
// the database runs. Records are never deleted here: `tierctl services
// forget` does that (Forget).
func (r *Registry) Record(ctx context.Context, q db.Querier, recordedBy string) error {
	doc, err := json.Marshal(r.Recorded())
	if err != nil {
		return fmt.Errorf("record services: %w", err)
	}
	if _, err := q.Exec(ctx, recordSQL, doc, recordedBy); err != nil {
		return fmt.Errorf("record services: %w", err)
	}
	return nil
}

// readRecordedSQL reads the whole record: one row per service.
const readRecordedSQL = `
SELECT name, base_queue, queues, kinds, recorded_by, first_seen_at, seen_at
FROM tierq_services ORDER BY name`

// ReadRecorded reads every recorded service (Record), by name.
func ReadRecorded(ctx context.Context, q db.Querier) ([]Recorded, error) {
	rows, err := q.Query(ctx, readRecordedSQL)
	if err != nil {
		return nil, fmt.Errorf("read recorded services: %w", err)
	}
	defer rows.Close()
	var out []Recorded
	for rows.Next() {
		var (
			rec   Recorded
			kinds []byte
		)
		if err := rows.Scan(&rec.Name, &rec.BaseQueue, &rec.Queues, &kinds, &rec.RecordedBy, &rec.FirstSeenAt, &rec.SeenAt); err != nil {
			return nil, fmt.Errorf("read recorded services: %w", err)
		}
		if err := json.Unmarshal(kinds, &rec.Kinds); err != nil {
			return nil, fmt.Errorf("read recorded services: service %s's kinds: %w", rec.Name, err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read recorded services: %w", err)
	}
	return out, nil
}

// Forget deletes the record of the service named name and says whether
// there was one. A process of the service that starts again records it
// again.
func Forget(ctx context.Context, q db.Querier, name string) (bool, error) {
	tag, err := q.Exec(ctx, `DELETE FROM tierq_services WHERE name = $1`, name)
	if err != nil {
		return false, fmt.Errorf("forget service %s: %w", name, err)
	}
	return tag.RowsAffected() > 0, nil
}
