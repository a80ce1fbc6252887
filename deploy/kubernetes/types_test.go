package kubernetes_test

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
)

// Short names for the workload types the tests switch on.
type (
	appsDeployment = appsv1.Deployment
	batchJob       = batchv1.Job
)
