// Package examples checks the files under examples/ that an operator
// deploys limiterd with: every YAML file parses strictly into its type
// (Kubernetes manifests into k8s.io/api types, Envoy's bootstrap into
// go-control-plane's, limiterd's configuration through limiterd itself,
// rule files through envoyrl), the Prometheus rules pass promtool, and the
// Grafana dashboard's queries parse and name only series that a running
// limiterd exports. TestEveryFileIsChecked fails when a file is added that
// no test checks.
//
// It is a module of its own so that k8s.io/api and Prometheus's PromQL
// parser stay out of the main module's dependencies.
package examples
