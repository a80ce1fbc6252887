// Package deploy holds tierq's deployment files that are not Go: the Grafana
// dashboard and its provisioning (grafana/), and Prometheus' scrape
// configuration and alert rules (prometheus/), used by the compose
// "observability" profile. Its tests check them against the metrics the
// processes really export. The Kubernetes manifests (kubernetes/) are a Go
// module of their own, with their own tests (docs/kubernetes.md).
package deploy
