// Package kubernetes holds tierq's Kubernetes manifests (a kustomize base,
// the dev, prod and prod-split overlays, the autoscaling components and an
// example of a team's own service) and their tests. It is a module of its
// own, so that the kustomize and Kubernetes modules its tests need never
// reach a library user's go.mod.
//
// The tests build every overlay with kustomize's Go API, as `kubectl apply
// -k` does, and check what a cluster cannot be asked here: every object
// decodes strictly into its k8s.io/api type or validates against KEDA's
// published CRD schema; every container's environment passes its process's
// configuration loader; probes, ports, grace periods, security settings,
// images and volumes agree with what the processes do; and every KEDA
// query runs against real PostgreSQL and returns what a seeded mix of jobs
// says it must. docs/kubernetes.md describes the manifests.
package kubernetes
