package image

import "strings"

// Versions are the versions the images are built from; hack/images.sh reads
// them from go.mod and hack/version.sh so that nothing here is hard-coded.
type Versions struct {
	// Kube is the pinned Kubernetes release, e.g. v1.37.2.
	Kube string
	// Gantry is Gantry's stamp, e.g. v1.37.2+gantry.0123456789ab.
	Gantry string
	// Etcd, CoreDNS, Kwok and Pause are the upstream versions of the
	// third-party components, e.g. 3.6.8, v1.14.2, v0.8.0, 3.10.
	Etcd, CoreDNS, Kwok, Pause string
	// Kueue is the version of Kueue hack/tools/kueue pins, e.g. v0.17.0.
	Kueue string
}

// TagFor makes a version usable as an image tag the way kubeadm does: "+" is
// not allowed in a tag and becomes "_".
func TagFor(version string) string { return strings.ReplaceAll(version, "+", "_") }

// Binary is a file of the image built per platform into the bin directory.
type Binary struct {
	// Name is the file name under <bin-dir>/<os>_<arch>/.
	Name string
	// Dest is the absolute path in the image.
	Dest string
}

// Component is one image: what goes in it and how it starts.
type Component struct {
	Name        string
	Description string
	// Version is what org.opencontainers.image.version says.
	Version string
	// Upstream names the pinned source the binaries come from.
	Upstream string
	// Tags, the first one being the tag kubeadm and kind ask for where they
	// ask for this image.
	Tags     []string
	Binaries []Binary
	// User is "uid:gid" (numeric, so no runtime needs to read /etc/passwd).
	User       string
	Entrypoint []string
	// Files are extra entries of the component layer (e.g. empty dirs).
	Files []File
	// RootFS adds the tree at <bin-dir>/<os>_<arch>/rootfs/<name>/ that
	// hack/images.sh writes: a userland the component runs programs of
	// (hack/debian-rootfs.sh), whose programs must load from it alone, or
	// plain files such as kwok's stages.
	RootFS bool
	// Test marks an image built for Gantry's test clusters only: it is
	// archived for `docker load` and preloaded into the kind node image,
	// but left out of the OCI layout that `make push` copies and `make
	// manifests` pins, so no release carries it.
	Test bool
}

const pathEnv = "PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"

const (
	rootUser    = "0:0"
	nonRootUser = "65532:65532"
)

// kubeProxy adds the userland kube-proxy runs: nft (its nftables mode) and
// iptables-nft (the clean-up of the other modes' rules at start).
func kubeProxy(c Component) Component {
	c.RootFS = true
	return c
}

// Components lists every image Gantry builds: its own control-plane parts,
// and each image a kind node needs that no registry here can provide.
//
// The Kubernetes control-plane images run as root, as upstream's do: kubeadm's
// static pods read root-only keys under /etc/kubernetes and etcd writes its
// root-owned host directory. CoreDNS needs to bind port 53; without a file
// capability a non-root process cannot use the NET_BIND_SERVICE capability
// kubeadm grants it, so it runs as root with every other capability dropped
// by kubeadm's manifest. Everything else runs as 65532 (pause as 65535, like
// upstream's).
func Components(v Versions) []Component {
	kubeTags := []string{v.Kube, TagFor(v.Gantry)}
	k8s := func(name, desc, version string) Component {
		return Component{
			Name: name, Description: desc, Version: version, Upstream: "k8s.io/kubernetes@" + v.Kube,
			Tags: kubeTags, User: rootUser,
			Binaries:   []Binary{{Name: name, Dest: "/usr/local/bin/" + name}},
			Entrypoint: []string{"/usr/local/bin/" + name},
		}
	}
	gantry := func(name, desc string) Component {
		return Component{
			Name: name, Description: desc, Version: v.Gantry, Upstream: "github.com/gantry-dev/gantry",
			// The release's tag too, as the Kubernetes images have: the
			// kind runtime deploys Gantry's workloads by it.
			Tags: kubeTags, User: nonRootUser,
			Binaries:   []Binary{{Name: name, Dest: "/" + name}},
			Entrypoint: []string{"/" + name},
		}
	}
	// upstream is one of upstream's control-plane components, unpatched, for
	// a stock control plane (`gantry-cluster up --control-plane stock`): the
	// image <name>-upstream runs it under its own name, as kubeadm's static
	// pods call it.
	upstream := func(name string) Component {
		c := k8s(name, "upstream's "+name+", unpatched, built from the pinned Kubernetes source (the stock control plane)", v.Kube)
		c.Name = name + "-upstream"
		c.Binaries = []Binary{{Name: c.Name, Dest: "/usr/local/bin/" + name}}
		return c
	}
	return []Component{
		k8s("kube-apiserver", "Gantry's kube-apiserver: upstream's with gated placement narrowing and Gantry's admission plugins", v.Gantry+".patched"),
		k8s("kube-scheduler", "Gantry's kube-scheduler: upstream's with Gantry's plugins, extension layer and profiles", v.Gantry),
		upstream("kube-apiserver"),
		upstream("kube-scheduler"),
		k8s("kube-controller-manager", "kube-controller-manager built from the pinned Kubernetes source", v.Gantry),
		kubeProxy(k8s("kube-proxy", "kube-proxy built from the pinned Kubernetes source, with nft and iptables from Debian", v.Gantry)),
		gantry("gantry-provisioner", "Gantry's ProvisioningRequest processor (check-capacity and atomic scale-up)"),
		gantry("gantry-webhook", "Gantry's MetadataPolicy and QoS admission webhook"),
		{
			Name: "etcd", Description: "etcd built from the module Kubernetes pins", Version: v.Etcd,
			Upstream: "go.etcd.io/etcd/server/v3@v" + v.Etcd, Tags: []string{v.Etcd + "-0"}, User: rootUser,
			Binaries:   []Binary{{Name: "etcd", Dest: "/usr/local/bin/etcd"}},
			Entrypoint: []string{"/usr/local/bin/etcd"},
			Files:      []File{{Path: "/var/lib/etcd", Dir: true, Mode: 0o700}},
		},
		{
			Name: "coredns", Description: "CoreDNS at the version kubeadm deploys", Version: v.CoreDNS,
			Upstream: "github.com/coredns/coredns@" + v.CoreDNS, Tags: []string{v.CoreDNS}, User: rootUser,
			Binaries:   []Binary{{Name: "coredns", Dest: "/coredns"}},
			Entrypoint: []string{"/coredns"},
		},
		{
			Name: "pause", Description: "Gantry's pod sandbox process", Version: v.Pause,
			Upstream: "github.com/gantry-dev/gantry/release/cmd/pause", Tags: []string{v.Pause}, User: "65535:65535",
			Binaries:   []Binary{{Name: "pause", Dest: "/pause"}},
			Entrypoint: []string{"/pause"},
		},
		{
			Name: "kwok", Description: "the kwok controller, for the fake nodes of the provisioner's node groups, with kwok's fast stages", Version: v.Kwok,
			Upstream: "sigs.k8s.io/kwok@" + v.Kwok, Tags: []string{v.Kwok}, User: nonRootUser,
			Binaries: []Binary{{Name: "kwok", Dest: "/usr/local/bin/kwok"}},
			// kwok has no stage built in: /etc/kwok/stages.yaml holds the
			// pinned module's fast node and pod stages (hack/images.sh).
			// --config is a list: a Deployment's --config adds to it.
			Entrypoint: []string{"/usr/local/bin/kwok", "--config=/etc/kwok/stages.yaml"},
			RootFS:     true,
		},
		{
			Name: "kueue", Description: "Kueue's manager, the ProvisioningRequest client Gantry's test clusters run (`gantry-cluster up --kueue`); not part of the release", Version: v.Kueue,
			Upstream: "sigs.k8s.io/kueue@" + v.Kueue, Tags: []string{v.Kueue}, User: nonRootUser,
			// Where Kueue's own image has it: its Deployment runs /manager.
			Binaries:   []Binary{{Name: "kueue", Dest: "/manager"}},
			Entrypoint: []string{"/manager"},
			Test:       true,
		},
	}
}
