//go:build tools

// kube-router v2.10.0: a proxier kpct tests, never a dependency of kpct. The newest release the
// Go module proxy serves whole (it lists only v2.1.0, which has reported security flaws; v2.11.1
// answers .info but refuses .mod and .zip; v2.10.1–v2.11.0 are refused). Its netlink pseudo-version
// is not served either: see the replace in go.mod.
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
