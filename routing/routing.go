// Package routing decides where a job goes: which River queue (by billing tier
// and by whether a scheduler produced it, as ADR-16 lays out) and at which
// River priority it starts inside that queue.
//
// Routing knows no particular service. It works on base queues: each base
// queue (a service's, see package service) names three queues, one per Class:
//
//	<base>_priority   pro, pro_plus and enterprise users
//	<base>_default    free users, and any tier that is unknown or unset
//	<base>_scheduled  background jobs from the scheduler, whatever the tier
//
// Producers call InsertOptsFor (a service's InsertOpts does, with its base
// queue), or SelectQueue and StartingPriority, before they insert a job. The
// queue names of a base queue are cached on first use (up to a bound), so
// routing does not allocate on the hot path. Unknown tiers are not an error,
// so a billing hiccup never stops work, but they are not silent either: each
// one is counted (UnknownTierCount) and, where a tier is parsed from text,
// logged (TierOrDefault).
package routing

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/riverqueue/river"

	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/tiers"
)

// Class is the kind of queue under a base queue: priority, default or scheduled.
type Class uint8

const (
	// Default holds free-tier and unknown-tier work. It is the zero value so
	// that anything not classified goes where ADR-16 sends unknown tiers.
	Default Class = iota
	// Priority holds paid-tier work.
	Priority
	// Scheduled holds background work enqueued by the scheduler.
	Scheduled
)

var classSuffixes = [...]string{Default: "default", Priority: "priority", Scheduled: "scheduled"}

// Classes are the three classes, priority first.
func Classes() []Class { return []Class{Priority, Default, Scheduled} }

// String returns "priority", "default" or "scheduled".
func (c Class) String() string {
	if int(c) < len(classSuffixes) {
		return classSuffixes[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// ParseClass returns the class named s ("priority", "default" or "scheduled").
func ParseClass(s string) (Class, error) {
	for c, suffix := range classSuffixes {
		if s == suffix {
			return Class(c), nil
		}
	}
	return 0, fmt.Errorf("unknown queue class %q (want priority, default or scheduled)", s)
}

// QueueName joins a base queue and a class: QueueName("thumbnails", Priority)
// is "thumbnails_priority".
func QueueName(baseQueue string, class Class) string {
	if names, ok := lookupNames(baseQueue); ok {
		return names[class]
	}
	return baseQueue + "_" + class.String()
}

// ClassOf returns the class of a queue name built by QueueName, and false when
// the name does not end in a known class suffix.
func ClassOf(queue string) (baseQueue string, class Class, ok bool) {
	for c, suffix := range classSuffixes {
		if n := len(queue) - len(suffix) - 1; n > 0 && queue[n] == '_' && queue[n+1:] == suffix {
			return queue[:n], Class(c), true
		}
	}
	return "", 0, false
}

// ClassFor returns the queue class for a tier: Scheduled when isScheduled,
// Priority for paid tiers, Default for free, the zero value and unknown tiers.
// Unknown tiers (anything but the four) are counted in UnknownTierCount.
func ClassFor(tier tiers.Tier, isScheduled bool) Class {
	if !tier.Valid() {
		unknownTiers.Add(1)
	}
	switch {
	case isScheduled:
		return Scheduled
	case tier.Paid():
		return Priority
	default:
		return Default
	}
}

// SelectQueue is ADR-16's queue selection: scheduled work goes to
// `<base>_scheduled`; pro, pro_plus and enterprise to `<base>_priority`; free,
// the zero value and unknown tiers to `<base>_default` (counted, see
// UnknownTierCount).
//
// It does not allocate for a base queue after its first use.
func SelectQueue(baseQueue string, tier tiers.Tier, isScheduled bool) string {
	return QueueName(baseQueue, ClassFor(tier, isScheduled))
}

// Priorities inside a queue. River runs priority 1 first and 4 last.
const (
	// PriorityEscalated is kept for operator escalation: no tier starts there.
	PriorityEscalated = 1
	// PriorityLowest is River's lowest priority, where free and unknown tiers start.
	PriorityLowest = 4
)

// StartingPriority is the River priority a tier's jobs start at inside their
// queue. Paid tiers share the priority queue and are ordered there:
// enterprise 2, pro_plus 3, pro 4. Free (and unknown) start at 4; free work
// never shares a queue with pro work except in `_scheduled`, where background
// jobs of both tie. Priority 1 is left to operator escalation, and aging moves
// waiting jobs up over time, so a pro job that has waited long enough catches
// up with fresh enterprise work.
func StartingPriority(tier tiers.Tier) int {
	switch tier {
	case tiers.Enterprise:
		return 2
	case tiers.ProPlus:
		return 3
	default:
		return PriorityLowest
	}
}

// InsertOptsFor is what a producer passes to River's Insert for a job whose
// queues have the base name baseQueue, on behalf of tenant (the user id the
// job runs for; empty for none) of the given tier: the queue from
// SelectQueue, the tier's starting priority, and metadata recording the
// tier, the tenant and where the job starts (InsertMetadata).
//
// The tenant is not checked here: a River client made from
// producer.ClientConfig refuses the insert when it breaks tierq's rule for
// tenant ids (jobmeta.CheckTenant: at most 200 bytes of UTF-8, no control
// characters), with producer.TenantHook. A client made without
// producer.ClientConfig must add that hook to its Config.Hooks, or check
// the tenant itself.
func InsertOptsFor(baseQueue string, tier tiers.Tier, tenant string, isScheduled bool) *river.InsertOpts {
	opts := &river.InsertOpts{
		Queue:    SelectQueue(baseQueue, tier, isScheduled),
		Priority: StartingPriority(tier),
	}
	opts.Metadata = InsertMetadata(tier, tenant, opts.Queue, opts.Priority)
	return opts
}

// InsertMetadata is the metadata of a job inserted for tier and tenant into
// queue at priority (jobmeta.Insert): for a producer that chooses the queue
// itself. An unknown tier is left out. The tenant is written as it is
// (bytes that are not UTF-8 too) and checked at insert by
// producer.TenantHook, as InsertOptsFor says.
func InsertMetadata(tier tiers.Tier, tenant, queue string, priority int) []byte {
	in := jobmeta.Insert{Tenant: tenant, Queue: queue, Priority: priority}
	if tier.Valid() {
		in.Tier = tier.String()
	}
	return in.JSON()
}

// TierOrDefault parses a tier name from a subscription, job args or a request.
// A name that is not a tier is logged at warn level and returned as the zero
// Tier, which routes to `_default` (and is counted there). It never fails, so a
// billing hiccup never stops work.
func TierOrDefault(ctx context.Context, logger *slog.Logger, name string) tiers.Tier {
	tier, err := tiers.Parse(name)
	if err != nil {
		logger.WarnContext(ctx, "unknown tier routes to default queue",
			slog.String("tier", name), slog.String("error", err.Error()))
		return 0
	}
	return tier
}

// unknownTiers counts routing decisions made for a tier that is not one of the
// four. It is process-wide on purpose: it is a monotonically increasing
// counter, like an expvar, read by UnknownTierCount (not exported as a metric:
// docs/operations.md, Unknown tiers).
var unknownTiers atomic.Uint64

// UnknownTierCount is the number of routing decisions this process made for a
// tier that is not free, pro, pro_plus or enterprise (the zero value included).
func UnknownTierCount() uint64 { return unknownTiers.Load() }

// queueNames caches the three queue names of each base queue, indexed by
// Class, so that routing does not allocate on the hot path.
type queueNames [len(classSuffixes)]string

var (
	cachedNames     sync.Map // string -> *queueNames
	cachedNameCount atomic.Int64
)

// maxCachedNames bounds the cache of base queues, so a producer passing
// arbitrary strings cannot grow memory forever. Past it, QueueName builds
// the names of a base queue not cached on each call.
const maxCachedNames = 1024

func newQueueNames(baseQueue string) *queueNames {
	var names queueNames
	for c, suffix := range classSuffixes {
		names[c] = baseQueue + "_" + suffix
	}
	return &names
}

func lookupNames(baseQueue string) (*queueNames, bool) {
	if v, ok := cachedNames.Load(baseQueue); ok {
		return v.(*queueNames), true //nolint:forcetypeassert // only *queueNames are stored
	}
	if cachedNameCount.Add(1) > maxCachedNames {
		cachedNameCount.Add(-1)
		return nil, false
	}
	v, loaded := cachedNames.LoadOrStore(baseQueue, newQueueNames(baseQueue))
	if loaded {
		cachedNameCount.Add(-1)
	}
	return v.(*queueNames), true //nolint:forcetypeassert // only *queueNames are stored
}
