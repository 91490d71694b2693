// CoreDNS with the few plugins a node's cluster DNS needs: answers for cluster.local from the API
// (kubernetes), a cache, errors and a query log, and the health and ready endpoints kubelet probes.
// No forward plugin is compiled in, so no query can leave the machine whatever a Corefile says.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// Each registers its directive with CoreDNS's setup when imported.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The order a query passes the plugins in, whatever order the Corefile lists them: the cache answers
// before kubernetes is asked, as in CoreDNS's own plugin.cfg.
func init() {
	dnsserver.Directives = []string{"ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() { coremain.Run() }
