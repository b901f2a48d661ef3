//go:build tools

// kube-proxy v1.35.4, built by ci/real-proxiers.sh from k8s.io/kubernetes (see go.mod's replaces).
package tools

import _ "k8s.io/kubernetes/cmd/kube-proxy"
