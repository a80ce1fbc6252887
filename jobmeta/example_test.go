package jobmeta_test

import (
	"fmt"

	"github.com/tierq/tierq/jobmeta"
)

// The metadata a producer records on a job it inserts: River's
// InsertOpts.Metadata (routing.InsertOptsFor sets it).
func ExampleInsert_JSON() {
	meta := jobmeta.Insert{Tier: "pro", Tenant: "u_123", Queue: "analysis_priority", Priority: 4}.JSON()
	fmt.Println(string(meta))
	// Output: {"tierq:tier":"pro","tierq:tenant":"u_123","tierq:original_queue":"analysis_priority","tierq:original_priority":4}
}

// Reading a job's metadata (rivertype.JobRow.Metadata), including the keys
// an earlier tierq wrote.
func ExampleRead() {
	info := jobmeta.Read([]byte(`{"tierq:tier": "enterprise", "tierq:tenant": "u_9", "tierq_base_priority": 3,
		"tierq:moves": [{"kind": "aging", "at": "2026-11-23T10:00:00Z", "to_queue": "analysis_priority", "from_priority": 3, "to_priority": 2}]}`))
	fmt.Println(info.Tier, info.Tenant, info.BasePriority)
	for _, m := range info.Moves {
		fmt.Println(m.Kind, m.At.Format("15:04"), m.ToQueue, m.FromPriority, "->", m.ToPriority)
	}
	// Output:
	// enterprise u_9 3
	// aging 10:00 analysis_priority 3 -> 2
}
