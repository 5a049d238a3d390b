package warmpool

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// NormalizeImage returns the fully qualified form the kubelet reports in node.status.images
// (docker.io/library/nginx:latest for "nginx"), so that a spec's short names compare with it:
// no registry → docker.io, a docker.io name without a namespace → library/, no tag or digest →
// :latest.
func NormalizeImage(ref string) string {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return ""
	}
	name, digest, hasDigest := strings.Cut(ref, "@")
	domain, rest := "docker.io", name
	if i := strings.IndexRune(name, '/'); i >= 0 {
		first := name[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" {
			domain, rest = first, name[i+1:]
		}
	}
	if domain == "index.docker.io" {
		domain = "docker.io"
	}
	if domain == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	if hasDigest {
		return domain + "/" + rest + "@" + digest
	}
	// A tag follows the last colon after the last slash.
	if i := strings.LastIndex(rest, ":"); i < 0 || i < strings.LastIndex(rest, "/") {
		rest += ":latest"
	}
	return domain + "/" + rest
}

// NormalizeImages normalizes, de-duplicates and sorts image references.
func NormalizeImages(refs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range refs {
		if n := NormalizeImage(r); n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// MissingImages returns the wanted images (normalized) that node.status.images does not list.
// The kubelet reports every name of an image (tags and digests); any one match counts.
func MissingImages(node *corev1.Node, wanted []string) []string {
	have := map[string]bool{}
	for _, img := range node.Status.Images {
		for _, n := range img.Names {
			have[NormalizeImage(n)] = true
		}
	}
	var missing []string
	for _, w := range wanted {
		if !have[NormalizeImage(w)] {
			missing = append(missing, w)
		}
	}
	return missing
}

// maxAutoImages bounds pre-pull "Auto": the kubelet reports at most 50 images in
// node.status.images (--node-status-max-images), the proof Lifeboat needs before hibernating.
const maxAutoImages = 40

// AutoImages are the images of protected Pods (containers and init containers), normalized,
// most used first, at most maxAutoImages.
func AutoImages(pods []corev1.Pod) []string {
	count := map[string]int{}
	for i := range pods {
		p := &pods[i]
		for _, c := range p.Spec.InitContainers {
			count[NormalizeImage(c.Image)]++
		}
		for _, c := range p.Spec.Containers {
			count[NormalizeImage(c.Image)]++
		}
	}
	delete(count, "")
	out := make([]string, 0, len(count))
	for img := range count {
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool {
		if count[out[i]] != count[out[j]] {
			return count[out[i]] > count[out[j]]
		}
		return out[i] < out[j]
	})
	if len(out) > maxAutoImages {
		out = out[:maxAutoImages]
	}
	sort.Strings(out)
	return out
}
