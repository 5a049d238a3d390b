// Package cli holds the `lifeboat` command: the simulation (`sim`), `status` against any
// cluster, and `pdb`, which prints the PodDisruptionBudget the webhook would suggest.
package cli

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// NewCommand is the root `lifeboat` command.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "lifeboat",
		Short: "Lifeboat keeps Spot workloads up through interruptions with hibernated warm nodes",
		Long: `lifeboat is the command-line companion of Lifeboat.

  lifeboat sim run        play a Spot-reclaim scenario on a local control plane, with and without Lifeboat
  lifeboat sim scenarios  list the built-in scenarios
  lifeboat status         warm pools, node states, protected workloads, recent interruptions
  lifeboat pdb KIND/NAME  the PodDisruptionBudget the webhook suggests for a workload
  lifeboat assess         classify the cluster's workloads for Spot, price them, write a scenario of the fleet`,
		SilenceUsage: true,
	}
	flags := genericclioptions.NewConfigFlags(true)
	root.AddCommand(newSimCommand(), newStatusCommand(flags), newPDBCommand(flags), newAssessCommand(flags))
	return root
}
