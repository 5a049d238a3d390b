package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

func newPDBCommand(flags *genericclioptions.ConfigFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pdb KIND/NAME",
		Short: "Print the PodDisruptionBudget the webhook would suggest for a workload",
		Long: `Print, ready to apply, the policy/v1 PodDisruptionBudget that lifeboat-webhook puts in its
denial for a protected workload without one: maxUnavailable 20%, the workload's own selector.

  lifeboat pdb deployment/web -n shop | kubectl apply -f -`,
		Example: "  lifeboat pdb deployment/web -n shop\n  lifeboat pdb statefulset/ledger -n shop",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, client, err := kubeClient(flags)
			if err != nil {
				return err
			}
			ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return err
			}
			out, err := suggestPDB(cmd.Context(), client, ns, args[0])
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), out)
			return nil
		},
	}
	flags.AddFlags(cmd.Flags())
	return cmd
}

// suggestPDB fetches the workload and renders the webhook's suggestion for it.
func suggestPDB(ctx context.Context, client kubernetes.Interface, ns, ref string) (string, error) {
	kind, name, ok := strings.Cut(ref, "/")
	if !ok || name == "" {
		return "", fmt.Errorf("want KIND/NAME, e.g. deployment/web; got %q", ref)
	}
	var sel *metav1.LabelSelector
	switch strings.ToLower(kind) {
	case "deployment", "deployments", "deploy":
		d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		sel = d.Spec.Selector
	case "statefulset", "statefulsets", "sts":
		s, err := client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		sel = s.Spec.Selector
	case "job", "jobs", "cronjob", "cronjobs", "cj":
		return "", fmt.Errorf("%s: Jobs and CronJobs are exempt from the PDB rule (no scale subresource to compute a percentage against); protect them with checkpoints and the best-effort tier", ref)
	default:
		return "", fmt.Errorf("%s: want a deployment or statefulset", ref)
	}
	return policy.SuggestedPDBYAML(ns, name, sel), nil
}
