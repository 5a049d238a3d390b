// Package audit is the other half of the Pod webhook's fail-open policy: a webhook that is down or
// times out lets Pods through unmutated (failurePolicy Ignore), and a protected workload admitted
// before the webhook was installed has no PDB. The audit finds both, periodically and at startup,
// and reports them as Events on the workload, log lines, and the
// lifeboat_webhook_audit_findings{finding} gauge to alert on.
package audit

import (
	"context"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/metricdef"
	"github.com/lifeboat-k8s/lifeboat/pkg/policy"
	"github.com/lifeboat-k8s/lifeboat/webhooks/state"
)

// Finding kinds, the values of the finding label and the reasons of the Events.
const (
	// FindingPodsUnprotected: Pods of a protected workload were admitted without Lifeboat's
	// mutation (webhook down or timed out, or Pods older than the workload's PDB).
	FindingPodsUnprotected = "PodsUnprotected"
	// FindingNoPDB: a protected Deployment or StatefulSet exists without a PDB (warn mode, a
	// workload older than the webhook, or a deleted PDB).
	FindingNoPDB = "NoPodDisruptionBudget"

	// EventReasonPrefix prefixes the Events' reasons: LifeboatPodsUnprotected, LifeboatNoPodDisruptionBudget.
	EventReasonPrefix = "Lifeboat"
)

var findings = metricdef.GaugeVec("lifeboat_webhook_audit_findings", "Protected workloads the last audit found unprotected, by finding (PodsUnprotected, NoPodDisruptionBudget).", "finding")

// Finding is one workload in need of attention.
type Finding struct {
	Kind      string // FindingPodsUnprotected or FindingNoPDB
	Namespace string
	Workload  policy.Workload
	// Pods counts the unmutated Pods (FindingPodsUnprotected).
	Pods int
	// Message says what to do.
	Message string
}

// Auditor runs the audit. It reads Pods and workloads with paginated lists (metadata only for
// Pods, filtered server-side to those without the lifeboat.dev/protected label), not watches, so
// its cost is a few list calls per interval rather than a cache of every Pod.
type Auditor struct {
	Config  policy.Config
	Cluster *state.Cluster
	// Lister reads from the API (not a cache).
	Lister   client.Reader
	Recorder events.EventRecorder
	Interval time.Duration
}

// NeedLeaderElection is false: one replica audits (the others would only repeat its Events),
// but lifeboat-webhook elects it with an elect.Campaign, which survives a lost lease, not with
// the manager's election, which would exit the process.
func (a *Auditor) NeedLeaderElection() bool { return false }

// Start audits now and every Interval until ctx ends.
func (a *Auditor) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("audit")
	ctx = klog.NewContext(ctx, logger)
	for {
		if _, err := a.Run(ctx); err != nil {
			logger.Error(err, "Audit failed; retrying at the next interval")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(a.Interval):
		}
	}
}

const pageSize = 500

// Run audits once and reports the findings.
func (a *Auditor) Run(ctx context.Context) ([]Finding, error) {
	logger := klog.FromContext(ctx)
	start := time.Now()
	unprotected, err := a.unmutatedPods(ctx)
	if err != nil {
		return nil, err
	}
	noPDB, err := a.workloadsWithoutPDB(ctx)
	if err != nil {
		return nil, err
	}
	all := append(unprotected, noPDB...)
	findings.WithLabelValues(FindingPodsUnprotected).Set(float64(len(unprotected)))
	findings.WithLabelValues(FindingNoPDB).Set(float64(len(noPDB)))
	for _, f := range all {
		logger.Info("Protected workload is not protected", "finding", f.Kind, "workload", klog.KRef(f.Namespace, f.Workload.Name), "kind", f.Workload.Kind, "pods", f.Pods, "action", f.Message)
		if a.Recorder != nil {
			a.Recorder.Eventf(workloadRef(f), nil, corev1.EventTypeWarning, EventReasonPrefix+f.Kind, "Audit", "%s", f.Message)
		}
	}
	logger.V(2).Info("Audit done", "findings", len(all), "duration", time.Since(start))
	return all, nil
}

// unmutatedPods finds Pods without lifeboat.dev/protected that the policy would protect now.
func (a *Auditor) unmutatedPods(ctx context.Context) ([]Finding, error) {
	req, err := labels.NewRequirement(v1alpha1.LabelProtected, selection.DoesNotExist, nil)
	if err != nil {
		return nil, err
	}
	sel := labels.NewSelector().Add(*req)
	byWorkload := map[string]*Finding{}
	pdbs := map[string][]*policyv1.PodDisruptionBudget{}
	nsLabels := map[string]map[string]string{}
	podList := func() *metav1.PartialObjectMetadataList {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		return list
	}
	err = eachPage(ctx, a.Lister, "Pods", podList, func(list *metav1.PartialObjectMetadataList) error {
		for i := range list.Items {
			pod := &list.Items[i]
			ns := pod.Namespace
			if a.Config.Exempt(ns) || pod.DeletionTimestamp != nil {
				continue
			}
			if _, ok := nsLabels[ns]; !ok {
				if nsLabels[ns], err = a.Cluster.NamespaceLabels(ctx, ns); err != nil {
					return err
				}
			}
			w, err := policy.ResolveWorkload(ctx, a.Cluster, ns, pod.OwnerReferences)
			if err != nil {
				// The owner is gone: the Pod is being garbage-collected.
				continue
			}
			if w.Supported() && policy.NeedsPDB(w.Kind) {
				if _, ok := pdbs[ns]; !ok {
					if pdbs[ns], err = a.Cluster.PDBs(ctx, ns); err != nil {
						return err
					}
				}
			}
			d := a.Config.DecidePod(policy.PodInput{Namespace: ns, NamespaceLabels: nsLabels[ns], Workload: w, PodLabels: pod.Labels, PDBs: pdbs[ns]})
			if !d.Protect {
				continue
			}
			key := ns + "/" + string(w.Kind) + "/" + w.Name
			f, ok := byWorkload[key]
			if !ok {
				f = &Finding{Kind: FindingPodsUnprotected, Namespace: ns, Workload: w}
				byWorkload[key] = f
			}
			f.Pods++
		}
		return nil
	}, client.MatchingLabelsSelector{Selector: sel})
	if err != nil {
		return nil, err
	}
	out := make([]Finding, 0, len(byWorkload))
	for _, f := range byWorkload {
		f.Message = fmt.Sprintf("%d Pods of protected %s %s/%s were admitted without Lifeboat's placement (webhook unavailable when they were created, or created before the workload's PodDisruptionBudget). %s",
			f.Pods, f.Workload.Kind, f.Namespace, f.Workload.Name, recreateHint(f.Workload, f.Namespace))
		out = append(out, *f)
	}
	sortFindings(out)
	return out, nil
}

func recreateHint(w policy.Workload, ns string) string {
	switch w.Kind {
	case policy.KindDeployment, policy.KindStatefulSet:
		return fmt.Sprintf("Recreate them with: kubectl -n %s rollout restart %s/%s", ns, lower(w.Kind), w.Name)
	default:
		return "They are protected from their next run on."
	}
}

func lower(k policy.Kind) string {
	switch k {
	case policy.KindDeployment:
		return "deployment"
	case policy.KindStatefulSet:
		return "statefulset"
	}
	return string(k)
}

// workloadsWithoutPDB finds protected Deployments and StatefulSets that no PDB covers.
func (a *Auditor) workloadsWithoutPDB(ctx context.Context) ([]Finding, error) {
	var out []Finding
	nsLabels := map[string]map[string]string{}
	pdbs := map[string][]*policyv1.PodDisruptionBudget{}
	check := func(in policy.WorkloadInput) error {
		if a.Config.Exempt(in.Namespace) {
			return nil
		}
		var err error
		if _, ok := nsLabels[in.Namespace]; !ok {
			if nsLabels[in.Namespace], err = a.Cluster.NamespaceLabels(ctx, in.Namespace); err != nil {
				return err
			}
		}
		if _, ok := pdbs[in.Namespace]; !ok {
			if pdbs[in.Namespace], err = a.Cluster.PDBs(ctx, in.Namespace); err != nil {
				return err
			}
		}
		in.NamespaceLabels, in.PDBs = nsLabels[in.Namespace], pdbs[in.Namespace]
		if v := a.Config.ValidateWorkload(in); v.MissingPDB {
			out = append(out, Finding{Kind: FindingNoPDB, Namespace: in.Namespace,
				Workload: policy.Workload{Kind: in.Kind, Name: in.Name, Labels: in.Labels}, Message: v.MissingPDBWarning})
		}
		return nil
	}
	if err := eachWorkload(ctx, a, "Deployments", func(l *appsv1.DeploymentList) []appsv1.Deployment { return l.Items },
		policy.DeploymentWorkload, check); err != nil {
		return nil, err
	}
	if err := eachWorkload(ctx, a, "StatefulSets", func(l *appsv1.StatefulSetList) []appsv1.StatefulSet { return l.Items },
		policy.StatefulSetWorkload, check); err != nil {
		return nil, err
	}
	sortFindings(out)
	return out, nil
}

// eachWorkload lists the workloads of one kind page by page (items are a page's objects) and
// checks the policy's view of each.
func eachWorkload[T, L any, PL interface {
	*L
	client.ObjectList
}](ctx context.Context, a *Auditor, what string, items func(PL) []T, view func(*T) policy.WorkloadInput, check func(policy.WorkloadInput) error) error {
	return eachPage(ctx, a.Lister, what, func() PL { return PL(new(L)) }, func(list PL) error {
		page := items(list)
		for i := range page {
			if err := check(view(&page[i])); err != nil {
				return err
			}
		}
		return nil
	})
}

// eachPage lists what with r, pageSize objects at a time, each page into a new list, and calls
// page with it.
func eachPage[L client.ObjectList](ctx context.Context, r client.Reader, what string, newList func() L, page func(L) error, opts ...client.ListOption) error {
	for cont := ""; ; {
		list := newList()
		if err := r.List(ctx, list, append([]client.ListOption{client.Limit(pageSize), client.Continue(cont)}, opts...)...); err != nil {
			return fmt.Errorf("list %s: %w", what, err)
		}
		if err := page(list); err != nil {
			return err
		}
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}

func sortFindings(f []Finding) {
	sort.Slice(f, func(i, j int) bool {
		if f[i].Namespace != f[j].Namespace {
			return f[i].Namespace < f[j].Namespace
		}
		return f[i].Workload.Name < f[j].Workload.Name
	})
}

// workloadRef is the object the Event is about. The events API needs only its identity.
func workloadRef(f Finding) runtime.Object {
	group := "apps/v1"
	if f.Workload.Kind == policy.KindJob || f.Workload.Kind == policy.KindCronJob {
		group = "batch/v1"
	}
	return &corev1.ObjectReference{APIVersion: group, Kind: string(f.Workload.Kind), Namespace: f.Namespace, Name: f.Workload.Name}
}
