package thumbnail

import (
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/service"
)

// Registry is the thumbnail service alone: what its worker deployment
// serves.
func Registry(deps Deps) (*service.Registry, error) {
	svc, err := Service(deps)
	if err != nil {
		return nil, err
	}
	return service.NewRegistry(svc)
}

// WithReference is the reference app's services (jobs.Registry, built
// with ref) joined with the thumbnail service: what the one scheduler and
// the one API of an application running both serve. The scheduler must
// know every kind, so that its rescuer retries a stuck job of any of them;
// the API accepts the kinds of its registry only.
func WithReference(ref jobs.Deps) (*service.Registry, error) {
	reference, err := jobs.Registry(ref)
	if err != nil {
		return nil, err
	}
	own, err := Registry(Deps{})
	if err != nil {
		return nil, err
	}
	return reference.Join(own)
}
