package awsemu

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Spot placement scores (GetSpotPlacementScores). The emulator's model:
//
//   - Every instance type has a score of 1–10 in every zone: DefaultPlacementScore unless
//     SetPlacementScore says otherwise, and 1 where a capacity fault (Faults.Capacity applying to
//     RunInstances) leaves the type without capacity.
//   - The score of a zone for a request is the minimum over the requested instance types (the
//     weakest type decides). Real EC2 scores the types as one diversified fleet, so more types
//     score higher there; the emulator is deliberately pessimistic. TargetCapacity and its unit
//     are validated but do not change the score.
//   - With SingleAvailabilityZone, one entry per zone of the emulator's region (the zones of
//     its subnets and those named in SetPlacementScore); otherwise one entry for the region,
//     the best of its zones (a regional request may use any zone). A RegionNames list without
//     the emulator's region scores nothing.
//   - Entries are ordered by score (highest first), then zone ID, and paged with MaxResults
//     (10–1000) and NextToken; without MaxResults, one page holds them all.
//   - Zones are reported by ID with the fixed mapping of ZoneID (us-east-1a → use1-az1).
//   - InstanceRequirementsWithMetadata is not emulated (UnsupportedOperation); DryRun answers
//     DryRunOperation.

// DefaultPlacementScore is the Spot placement score of an instance type in a zone that
// SetPlacementScore and the capacity faults leave alone.
const DefaultPlacementScore = 9

// placementKey is one SetPlacementScore setting; empty fields match every type or zone.
type placementKey struct{ instanceType, zone string }

// SetPlacementScore sets the Spot placement score (1–10) of instanceType in zone, a zone name
// (us-east-1a). An empty instanceType or zone matches every type or zone; the most specific
// setting wins: (type, zone), then (type, ""), then ("", zone), then ("", ""), then
// DefaultPlacementScore. A type without capacity in the zone (Faults.Capacity) scores 1
// whatever is set. A score outside 1–10 panics: it is a bug in the test.
func (e *Emulator) SetPlacementScore(instanceType, zone string, score int) {
	if score < 1 || score > 10 {
		panic(fmt.Sprintf("awsemu: placement score %d for %q in %q is outside 1–10", score, instanceType, zone))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ec2.placementScores[placementKey{instanceType, zone}] = score
}

// ResetPlacementScores forgets every SetPlacementScore: all scores are the default again.
func (e *Emulator) ResetPlacementScores() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.ec2.placementScores)
}

// PlacementScore is the score of one instance type in one zone (a name), as
// GetSpotPlacementScores computes it.
func (e *Emulator) PlacementScore(instanceType, zone string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.placementScoreLocked(instanceType, zone)
}

func (e *Emulator) placementScoreLocked(instanceType, zone string) int {
	if e.noCapacityLocked(false, instanceType, zone) {
		return 1
	}
	for _, k := range []placementKey{{instanceType, zone}, {instanceType, ""}, {"", zone}, {"", ""}} {
		if s, ok := e.ec2.placementScores[k]; ok {
			return s
		}
	}
	return DefaultPlacementScore
}

// regionDirections abbreviate the words of a region name in zone IDs.
var regionDirections = map[string]string{
	"north": "n", "south": "s", "east": "e", "west": "w", "central": "c",
	"northeast": "ne", "northwest": "nw", "southeast": "se", "southwest": "sw",
}

// ZoneID is the emulator's availability-zone ID of a zone name: the region's short code and
// the zone letter's position, us-east-1a → use1-az1, us-east-1c → use1-az3, eu-west-1b →
// euw1-az2, ap-southeast-2a → apse2-az1. Real EC2 maps names to IDs differently per account;
// the emulator's mapping is fixed. A name that is not a region followed by a letter is
// returned unchanged.
func ZoneID(zone string) string {
	n := len(zone)
	if n < 2 || zone[n-1] < 'a' || zone[n-1] > 'z' || zone[n-2] < '0' || zone[n-2] > '9' {
		return zone
	}
	parts := strings.Split(zone[:n-1], "-")
	if len(parts) < 3 {
		return zone
	}
	var b strings.Builder
	b.WriteString(parts[0])
	for _, p := range parts[1 : len(parts)-1] {
		if abbr, ok := regionDirections[p]; ok {
			b.WriteString(abbr)
		} else if p != "" {
			b.WriteByte(p[0])
		}
	}
	b.WriteString(parts[len(parts)-1])
	return b.String() + "-az" + strconv.Itoa(int(zone[n-1]-'a')+1)
}

// placementRequest is a validated GetSpotPlacementScores request.
type placementRequest struct {
	instanceTypes []string
	regions       []string
	singleAZ      bool
	maxResults    int
	offset        int
	dryRun        bool
}

func parsePlacementRequest(form url.Values) (placementRequest, *ec2Error) {
	req := placementRequest{
		instanceTypes: flatList(form, "InstanceType"),
		regions:       flatList(form, "RegionName"),
		singleAZ:      form.Get("SingleAvailabilityZone") == "true",
		dryRun:        form.Get("DryRun") == "true",
	}
	if err := checkPlacementTypes(form, req.instanceTypes); err != nil {
		return req, err
	}
	if form.Get("TargetCapacity") == "" {
		return req, clientErr("MissingParameter", "The request must contain the parameter TargetCapacity")
	}
	capacity, err := formInt(form, "TargetCapacity", 0)
	if err != nil {
		return req, err
	}
	if capacity < 1 || capacity > 2_000_000 {
		return req, clientErr("InvalidParameterValue", "Value ( %d ) for parameter TargetCapacity is invalid. Expecting a value between 1 and 2000000.", capacity)
	}
	switch unit := form.Get("TargetCapacityUnitType"); unit {
	case "", "units", "vcpu", "memory-mib":
	default:
		return req, clientErr("InvalidParameterValue", "Value (%s) for parameter TargetCapacityUnitType is invalid. Expecting units, vcpu or memory-mib.", unit)
	}
	if req.maxResults, err = formInt(form, "MaxResults", 0); err != nil {
		return req, err
	}
	if _, set := form["MaxResults"]; set && (req.maxResults < 10 || req.maxResults > 1000) {
		return req, clientErr("InvalidParameterValue", "Value ( %d ) for parameter MaxResults is invalid. Expecting a value between 10 and 1000.", req.maxResults)
	}
	if tok := form.Get("NextToken"); tok != "" {
		n, perr := strconv.Atoi(strings.TrimPrefix(tok, "emu-"))
		if perr != nil || n < 0 || !strings.HasPrefix(tok, "emu-") {
			return req, clientErr("InvalidParameterValue", "The token '%s' is invalid", tok)
		}
		req.offset = n
	}
	return req, nil
}

// checkPlacementTypes: instance types (family.size) or, not emulated, instance requirements,
// exactly one of the two.
func checkPlacementTypes(form url.Values, types []string) *ec2Error {
	requirements := false
	for k := range form {
		if strings.HasPrefix(k, "InstanceRequirementsWithMetadata.") {
			requirements = true
			break
		}
	}
	switch {
	case requirements && len(types) > 0:
		return clientErr("InvalidParameterCombination", "InstanceTypes and InstanceRequirementsWithMetadata cannot be specified together.")
	case requirements:
		return clientErr("UnsupportedOperation", "The emulator does not score InstanceRequirementsWithMetadata; specify InstanceTypes.")
	case len(types) == 0:
		return clientErr("MissingParameter", "The request must contain either InstanceTypes or InstanceRequirementsWithMetadata.")
	}
	for _, t := range types {
		family, size, ok := strings.Cut(t, ".")
		if !ok || family == "" || size == "" || strings.Contains(size, ".") {
			return clientErr("InvalidParameterValue", "Value (%s) for parameter InstanceType is invalid.", t)
		}
	}
	return nil
}

type xmlSpotPlacementScore struct {
	Region             string `xml:"region"`
	AvailabilityZoneID string `xml:"availabilityZoneId,omitempty"`
	Score              int    `xml:"score"`
}

type xmlGetSpotPlacementScoresResponse struct {
	XMLName   xml.Name                `xml:"GetSpotPlacementScoresResponse"`
	Xmlns     string                  `xml:"xmlns,attr"`
	RequestID string                  `xml:"requestId"`
	Scores    []xmlSpotPlacementScore `xml:"spotPlacementScoreSet>item"`
	NextToken string                  `xml:"nextToken,omitempty"`
}

func (e *Emulator) getSpotPlacementScoresLocked(form url.Values) (any, *ec2Error) {
	req, err := parsePlacementRequest(form)
	if err != nil {
		return nil, err
	}
	if req.dryRun {
		return nil, &ec2Error{status: http.StatusPreconditionFailed, code: "DryRunOperation", message: "Request would have succeeded, but DryRun flag is set."}
	}
	scores := e.placementScoresLocked(req)
	resp := &xmlGetSpotPlacementScoresResponse{Xmlns: ec2XMLNamespace, RequestID: e.requestIDLocked()}
	offset := min(req.offset, len(scores))
	page := scores[offset:]
	if req.maxResults > 0 && len(page) > req.maxResults {
		page = page[:req.maxResults]
		resp.NextToken = "emu-" + strconv.Itoa(offset+req.maxResults)
	}
	resp.Scores = page
	return resp, nil
}

// placementScoresLocked scores the request's zones (or its region), best first.
func (e *Emulator) placementScoresLocked(req placementRequest) []xmlSpotPlacementScore {
	region := e.opts.Region
	if len(req.regions) > 0 && !slices.Contains(req.regions, region) {
		return nil
	}
	var out []xmlSpotPlacementScore
	best := 0
	for _, zone := range e.placementZonesLocked() {
		score := 10
		for _, t := range req.instanceTypes {
			score = min(score, e.placementScoreLocked(t, zone))
		}
		best = max(best, score)
		if req.singleAZ {
			out = append(out, xmlSpotPlacementScore{Region: region, AvailabilityZoneID: ZoneID(zone), Score: score})
		}
	}
	if !req.singleAZ {
		return []xmlSpotPlacementScore{{Region: region, Score: best}}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].AvailabilityZoneID < out[j].AvailabilityZoneID
	})
	return out
}

// placementZonesLocked are the zone names of the emulator's region: its subnets' zones and the
// zones named in SetPlacementScore.
func (e *Emulator) placementZonesLocked() []string {
	var zones []string
	add := func(z string) {
		if z != "" && strings.HasPrefix(z, e.opts.Region) && !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	for _, z := range e.opts.Subnets {
		add(z)
	}
	for k := range e.ec2.placementScores {
		add(k.zone)
	}
	if len(zones) == 0 {
		add(e.opts.Region + "a") // the default subnet's zone
	}
	sort.Strings(zones)
	return zones
}
