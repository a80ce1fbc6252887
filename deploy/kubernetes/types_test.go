package kubernetes_test

import (
	"iter"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
)

// Short names for the workload types the tests switch on.
type (
	appsDeployment = appsv1.Deployment
	batchJob       = batchv1.Job
)

// autoscalingHPA is autoscaling/v2's HorizontalPodAutoscaler.
type autoscalingHPA = autoscalingv2.HorizontalPodAutoscaler

// mapsKeysIter is maps.Keys.
func mapsKeysIter[V any](m map[string]V) iter.Seq[string] { return maps.Keys(m) }
