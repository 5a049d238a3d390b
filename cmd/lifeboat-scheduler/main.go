// Command lifeboat-scheduler is kube-scheduler with Lifeboat's out-of-tree plugins
// registered. Every kube-scheduler flag and the KubeSchedulerConfiguration (v1) file work as
// usual; the profile is in manifests/scheduler/config.yaml.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/scheme" // decode the plugins' args
	"github.com/lifeboat-k8s/lifeboat/plugins/capacitypoolspread"
	"github.com/lifeboat-k8s/lifeboat/plugins/lifeboatplacement"
	"github.com/lifeboat-k8s/lifeboat/plugins/lifeboattaints"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(lifeboattaints.Name, lifeboattaints.New),
		app.WithPlugin(lifeboatplacement.Name, lifeboatplacement.New),
		app.WithPlugin(capacitypoolspread.Name, capacitypoolspread.New),
	)
	os.Exit(cli.Run(command))
}
