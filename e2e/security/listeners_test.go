package security

import (
	"net"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// Finding N7 of the second review: the local runtime's etcd served plain
// HTTP, unauthenticated, on every interface of the developer's machine.
var _ = framework.Describe("The local cluster's processes", ginkgo.Label(framework.LabelSecurity), func() {
	ginkgo.It("listen on the loopback only", func() {
		var lister cluster.ListenerLister
		if c := framework.TestContext.Local; c != nil {
			lister, _ = c.Runtime().(cluster.ListenerLister)
		}
		if lister == nil {
			ginkgo.Skip("the cluster's components are not processes of this machine (only the local runtime's are)")
		}
		listeners, err := lister.Listeners()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		components := map[string]bool{}
		var open []string
		for _, l := range listeners {
			components[l.Component] = true
			host, _, err := net.SplitHostPort(l.Address)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				open = append(open, l.Component+" on "+l.Address)
			}
		}
		ginkgo.GinkgoWriter.Printf("%d listening sockets: %v\n", len(listeners), listeners)
		// Not vacuous: the processes that must listen were found.
		for _, c := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok-controller"} {
			gomega.Expect(components).To(gomega.HaveKey(c), "no listening socket of %s among %v", c, listeners)
		}
		gomega.Expect(open).To(gomega.BeEmpty(), "sockets reachable from other machines: %s", strings.Join(open, ", "))
	})
})
