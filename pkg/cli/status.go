package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/nodepool"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback/reclaimplan"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
)

var reclaimBackPolicyGVR = schema.GroupVersionResource{Group: v1alpha1.Group, Version: "v1alpha1", Resource: "reclaimbackpolicies"}

var warmPoolGVR = schema.GroupVersionResource{Group: v1alpha1.Group, Version: "v1alpha1", Resource: "warmpools"}

func newStatusCommand(flags *genericclioptions.ConfigFlags) *cobra.Command {
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Warm pools, node states, protected workloads and their PDBs, recent interruptions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, client, err := kubeClient(flags)
			if err != nil {
				return err
			}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			return printStatus(cmd.Context(), cmd.OutOrStdout(), client, dyn, since)
		},
	}
	cmd.Flags().DurationVar(&since, "since", time.Hour, "how far back to list interruptions and resumes")
	flags.AddFlags(cmd.Flags())
	return cmd
}

// kubeClient is the client of the kubeconfig the flags name, and its REST config.
func kubeClient(flags *genericclioptions.ConfigFlags) (*rest.Config, kubernetes.Interface, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return cfg, client, nil
}

func printStatus(ctx context.Context, out io.Writer, client kubernetes.Interface, dyn dynamic.Interface, since time.Duration) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	defer tw.Flush()

	fmt.Fprintln(tw, "WARM POOLS")
	list, err := dyn.Resource(warmPoolGVR).List(ctx, metav1.ListOptions{})
	switch {
	case err != nil:
		fmt.Fprintf(tw, "  cannot list WarmPools (%v): is the CRD installed (manifests/crds)?\n", err)
	case len(list.Items) == 0:
		fmt.Fprintln(tw, "  none: create a WarmPool (docs/WARMPOOL.md)")
	default:
		fmt.Fprintln(tw, "  NAME\tDESIRED\tSTANDBY\tWARMING\tACTIVE\tDRAINING\tREADY\tLAST ACTIVATION\tCOST/MONTH\tAS OVERPROVISIONING")
		for _, u := range list.Items {
			wp := &v1alpha1.WarmPool{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, wp); err != nil {
				return fmt.Errorf("decode WarmPool %s: %w", u.GetName(), err)
			}
			last := "never"
			if wp.Status.LastActivation != nil {
				last = time.Since(wp.Status.LastActivation.Time).Round(time.Second).String() + " ago"
			}
			monthly, over := costColumns(wp.Status.Cost)
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", wp.Name, wp.Status.Desired, wp.Status.Standby, wp.Status.Warming,
				wp.Status.Active, wp.Status.Draining, conditionStatus(wp.Status.Conditions, "Ready"), last, monthly, over)
		}
	}

	fmt.Fprintln(tw, "\nPOOL NODES")
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelPool})
	if err != nil {
		return err
	}
	if len(nodes.Items) == 0 {
		fmt.Fprintln(tw, "  none")
	} else {
		fmt.Fprintln(tw, "  NODE\tPOOL\tSTATE\tTYPE\tZONE\tREADY")
		for _, n := range nodes.Items {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Labels[v1alpha1.LabelPool], n.Labels[v1alpha1.LabelState],
				n.Labels[v1alpha1.LabelInstanceType], n.Labels[v1alpha1.LabelZone], readyStatus(&n))
		}
	}

	fmt.Fprintln(tw, "\nON-DEMAND FALLBACK CAPACITY (Karpenter's On-Demand nodes that Spot could take back)")
	if err := printFallback(ctx, tw, client, dyn); err != nil {
		return err
	}
	printReclaimBack(ctx, tw, dyn)

	fmt.Fprintln(tw, "\nPROTECTED WORKLOADS")
	if err := printProtected(ctx, tw, client); err != nil {
		return err
	}

	fmt.Fprintf(tw, "\nINTERRUPTIONS AND RESUMES (last %s)\n", since)
	evs, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	type event struct {
		at time.Time
		e  corev1.Event
	}
	var recent []event
	for _, e := range evs.Items {
		t := e.LastTimestamp.Time
		if t.IsZero() {
			t = e.EventTime.Time
		}
		if time.Since(t) > since || !isLifecycleEvent(&e) {
			continue
		}
		recent = append(recent, event{t, e})
	}
	sort.Slice(recent, func(i, j int) bool { return recent[i].at.Before(recent[j].at) })
	if len(recent) == 0 {
		fmt.Fprintln(tw, "  none")
	}
	for _, r := range recent {
		fmt.Fprintf(tw, "  %s\t%s\t%s/%s\t%s\n", r.at.Local().Format(time.TimeOnly), r.e.Reason, r.e.InvolvedObject.Kind, r.e.InvolvedObject.Name, r.e.Message)
	}
	return nil
}

// isLifecycleEvent keeps Karpenter's interruption signal and the warm pool's lifecycle events
// (launch, hibernate, resume, handoff, recycle), not scheduling chatter.
func isLifecycleEvent(e *corev1.Event) bool {
	if e.Reason == "SpotInterrupted" {
		return true
	}
	from := e.Source.Component + e.ReportingController
	if !strings.Contains(from, "lifeboat") || strings.Contains(from, "lifeboat-scheduler") {
		return false
	}
	return e.InvolvedObject.Kind == "WarmPool" || e.InvolvedObject.Kind == "Node"
}

// printProtected lists Deployments and StatefulSets that Lifeboat protects (namespace or
// workload label) and the PDBs that select their Pods.
func printProtected(ctx context.Context, tw io.Writer, client kubernetes.Interface) error {
	nss, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintln(tw, "  WORKLOAD\tTIER\tPDB")
	any := false
	for _, ns := range nss.Items {
		nsProtected := ns.Labels[v1alpha1.LabelSpot] == v1alpha1.SpotProtected
		pdbs, err := client.PolicyV1().PodDisruptionBudgets(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		type wl struct {
			kind, name   string
			labels, tmpl map[string]string
		}
		var wls []wl
		deps, err := client.AppsV1().Deployments(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, d := range deps.Items {
			wls = append(wls, wl{"Deployment", d.Name, d.Labels, d.Spec.Template.Labels})
		}
		sts, err := client.AppsV1().StatefulSets(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, s := range sts.Items {
			wls = append(wls, wl{"StatefulSet", s.Name, s.Labels, s.Spec.Template.Labels})
		}
		for _, w := range wls {
			switch w.labels[v1alpha1.LabelSpot] {
			case v1alpha1.SpotOff:
				continue
			case v1alpha1.SpotProtected:
			default:
				if !nsProtected {
					continue
				}
			}
			any = true
			tier, _ := policy.ResolveTier(policy.Kind(w.kind), w.labels, w.tmpl)
			var names []string
			for i := range pdbs.Items {
				p := &pdbs.Items[i]
				if sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector); err == nil && !sel.Empty() && sel.Matches(labels.Set(w.tmpl)) {
					names = append(names, p.Name)
				}
			}
			pdb := strings.Join(names, ",")
			if pdb == "" {
				pdb = "MISSING — lifeboat pdb " + strings.ToLower(w.kind) + "/" + w.name + " -n " + ns.Name
			}
			fmt.Fprintf(tw, "  %s/%s/%s\t%s\t%s\n", ns.Name, strings.ToLower(w.kind), w.name, tier, pdb)
		}
	}
	if !any {
		fmt.Fprintln(tw, "  none: label a namespace or workload lifeboat.dev/spot=protected (docs/POLICY.md)")
	}
	return nil
}

func conditionStatus(conds []metav1.Condition, t string) string {
	for _, c := range conds {
		if c.Type == t {
			return string(c.Status)
		}
	}
	return "Unknown"
}

func readyStatus(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status)
		}
	}
	return "Unknown"
}

// costColumns renders status.cost: the pool's monthly cost, and what the same cover would cost
// as overprovisioning with the ratio between them.
func costColumns(c *v1alpha1.CostStatus) (monthly, overprovisioning string) {
	if c == nil || c.Monthly == "" {
		return "-", "-"
	}
	monthly = "$" + c.Monthly
	if c.OverprovisioningMonthly == "" {
		return monthly, "- (set --on-demand-hourly-price or spec.pricing)"
	}
	overprovisioning = "$" + c.OverprovisioningMonthly
	m, err1 := strconv.ParseFloat(c.Monthly, 64)
	o, err2 := strconv.ParseFloat(c.OverprovisioningMonthly, 64)
	if err1 == nil && err2 == nil && o > 0 {
		overprovisioning += fmt.Sprintf(" (pool is %.2f×)", m/o)
	}
	return monthly, overprovisioning
}

// printFallback lists Karpenter's On-Demand nodes and whether their Pods could move to Spot
// (reclaimplan.FindFallback): capacity Karpenter fell back to in a Spot shortage and keeps.
func printFallback(ctx context.Context, tw io.Writer, client kubernetes.Interface, dyn dynamic.Interface) error {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelCapacityType + "=on-demand," + reclaimplan.LabelNodePool})
	if err != nil {
		return err
	}
	if len(nodes.Items) == 0 {
		fmt.Fprintln(tw, "  none")
		return nil
	}
	spotAllowed := map[string]bool{}
	nps, err := dyn.Resource(nodePoolGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(tw, "  cannot list Karpenter's NodePools (%v)\n", err)
		return nil
	}
	for _, u := range nps.Items {
		np := &karpv1.NodePool{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, np); err != nil {
			return fmt.Errorf("decode NodePool %s: %w", u.GetName(), err)
		}
		spotAllowed[np.Name] = nodepool.Assess(np).SpotAllowed
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	byNode := map[string][]*corev1.Pod{}
	for j := range pods.Items {
		p := &pods.Items[j]
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	infos := make([]reclaimplan.NodeInfo, 0, len(nodes.Items))
	for i := range nodes.Items {
		infos = append(infos, reclaimplan.NodeInfo{Node: &nodes.Items[i], Pods: byNode[nodes.Items[i].Name]})
	}
	fmt.Fprintln(tw, "  NODE\tNODEPOOL\tPODS\tSPOT COULD TAKE IT BACK")
	for _, c := range reclaimplan.FindFallback(infos, spotAllowed, nil) {
		pods, verdict := fmt.Sprint(c.Pods), "yes"
		if c.Excluded != "" {
			pods, verdict = "-", "no: "+c.Detail
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Node, c.NodePool, pods, verdict)
	}
	return nil
}

// printReclaimBack adds, under the fallback capacity, what each ReclaimBackPolicy is doing
// about it (docs/RECLAIMBACK.md). Nothing without a policy or without the CRD.
func printReclaimBack(ctx context.Context, tw io.Writer, dyn dynamic.Interface) {
	list, err := dyn.Resource(reclaimBackPolicyGVR).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		return
	}
	fmt.Fprintln(tw, "  RECLAIM-BACK POLICY\tFALLBACK\tMOVING\tRETURNED\tNODE-HOURS\tBLOCKED")
	for _, u := range list.Items {
		p := &v1alpha1.ReclaimBackPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
			fmt.Fprintf(tw, "  %s\tcannot decode: %v\n", u.GetName(), err)
			continue
		}
		moving := make([]string, 0, len(p.Status.InFlight))
		for _, m := range p.Status.InFlight {
			moving = append(moving, m.Node+" ("+m.Phase+")")
		}
		blocked := "no"
		if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionBlocked); c != nil && c.Status == metav1.ConditionTrue {
			blocked = c.Reason + ": " + c.Message
		}
		hours := p.Status.OnDemandNodeHoursReturned
		if hours == "" {
			hours = "0"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%s\t%s\n", p.Name, p.Status.FallbackNodes, orDash(strings.Join(moving, ", ")), p.Status.ReturnedNodes, hours, blocked)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
