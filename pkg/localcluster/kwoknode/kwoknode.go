// Package kwoknode holds the local control plane's conventions for KWOK Nodes and Pods (the
// stages pkg/localcluster configures read them), in a package of constants only, so that the
// AWS emulator (pkg/cloud/awsemu), which registers Nodes for its instances, shares them
// without depending on the control plane.
package kwoknode

const (
	// Annotation and AnnotationValue select the Nodes KWOK manages.
	Annotation      = "kwok.x-k8s.io/node"
	AnnotationValue = "fake"

	// LabelPower=PowerOff makes a Node stop heartbeating and turn Ready=False (a powered-off
	// instance, e.g. hibernated); removing it powers the Node on.
	LabelPower = "lifeboat.dev/power"
	PowerOff   = "off"
	// AnnotationReadyAt (RFC 3339) is when a booting or powered-on Node turns Ready.
	AnnotationReadyAt = "sim.lifeboat.dev/ready-at"
	// AnnotationStartAt is when a Pod on a KWOK Node turns Running/Ready; AnnotationRunFor how
	// long a Job's Pod runs before it completes.
	AnnotationStartAt = "sim.lifeboat.dev/start-at"
	AnnotationRunFor  = "sim.lifeboat.dev/run-for"
)
