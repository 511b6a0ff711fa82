// Command kube is the control plane the end-to-end tests run against, as one multi-call binary:
//
//	kube kube-apiserver [flags]
//	kube kube-controller-manager [flags]
//	kube kube-scheduler [flags]
//	kube kubelet [flags]
//	kube kube-proxy [flags]
//	kube etcd [flags]
//
// (or a link named after the component). One binary links the large shared part of Kubernetes
// once instead of five times, which roughly halves the first build and makes the node's two
// components (kubelet, kube-proxy) cost only the packages they add. Each component is the
// unmodified upstream command; this file only chooses which one runs.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // CronJob time zones, as the upstream mains do

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric, as upstream
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// kubeCommands are the Kubernetes components, each built as its upstream main builds it.
var kubeCommands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if _, ok := kubeCommands[name]; !ok && name != "etcd" {
		if len(args) == 0 {
			usage()
		}
		name, args = args[0], args[1:]
	}
	// Each component then sees the command line it would see as its own binary.
	os.Args = append([]string{name}, args...)
	if name == "etcd" {
		etcdmain.Main(os.Args)
		return
	}
	newCommand, ok := kubeCommands[name]
	if !ok {
		usage()
	}
	command := newCommand()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}

func usage() {
	names := []string{"etcd"}
	for name := range kubeCommands {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: kube COMPONENT [flags...]; COMPONENT is one of %v\n", names)
	os.Exit(2)
}
