package service_test

import (
	"context"
	"fmt"
	"log"

	"github.com/riverqueue/river"

	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// ResizeArgs are a team's own job args: no tier field, tierq keeps the tier
// in the job's metadata.
type ResizeArgs struct {
	Image string `json:"image"`
}

func (ResizeArgs) Kind() string { return "resize" }

type ResizeWorker struct {
	river.WorkerDefaults[ResizeArgs]
}

func (*ResizeWorker) Work(context.Context, *river.Job[ResizeArgs]) error { return nil }

// A team's own service, registered beside others: its queues, and where a
// job for a pro user goes.
func Example() {
	media, err := service.New(&service.Config{
		Name:      "media",
		BaseQueue: "thumbnails",
		Kinds:     []service.Kind{service.WorkerKind(&ResizeWorker{})},
		Workers:   &service.ClassWorkers{Priority: 4, Default: 2, Scheduled: 1},
	})
	if err != nil {
		log.Fatal(err)
	}
	registry, err := service.NewRegistry(media)
	if err != nil {
		log.Fatal(err)
	}

	fmt.Println(registry.Queues())
	svc, class, _ := registry.ForQueue("thumbnails_default")
	fmt.Println(svc.Name(), class, svc.Workers().Of(class), "workers by default, "+svc.EnvPrefix()+"QUEUE_DEFAULT_WORKERS overrides")

	opts := media.InsertOpts(tiers.Pro, "u_42", false)
	fmt.Println(opts.Queue, opts.Priority, string(opts.Metadata))
	// Output:
	// [thumbnails_priority thumbnails_default thumbnails_scheduled]
	// media default 2 workers by default, MEDIA_QUEUE_DEFAULT_WORKERS overrides
	// thumbnails_priority 4 {"tierq:tier":"pro","tierq:tenant":"u_42","tierq:original_queue":"thumbnails_priority","tierq:original_priority":4}
}

// Args decoded as the API decodes a request's: strictly, into the kind's
// own type.
func ExampleKind_DecodeArgs() {
	kind := service.WorkerKind(&ResizeWorker{})
	args, err := kind.DecodeArgs([]byte(`{"image": "cat.png"}`))
	fmt.Printf("%#v %v\n", args, err)
	_, err = kind.DecodeArgs([]byte(`{"image": "cat.png", "tier": "pro"}`))
	fmt.Println(err)
	// Output:
	// service_test.ResizeArgs{Image:"cat.png"} <nil>
	// unknown field "tier"
}
