package awsemu

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// EC2 Query API version the SDK sends (Version=2016-11-15) and the XML namespace of responses.
const ec2XMLNamespace = "http://ec2.amazonaws.com/doc/2016-11-15/"

// EC2 instance state codes (the low byte of InstanceState.Code).
var stateCodes = map[string]int{
	"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80,
}

// memoryGiB of instance types the emulator knows, for the hibernation root-volume check and the
// Node capacity. Unknown types get 8 GiB / 2 vCPU.
var instanceShapes = map[string]struct{ vcpu, memGiB int }{
	"t3.medium": {2, 4}, "t3.large": {2, 8}, "t3.xlarge": {4, 16},
	"m5.large": {2, 8}, "m5.xlarge": {4, 16}, "m5.2xlarge": {8, 32},
	"m5a.large": {2, 8}, "m5a.xlarge": {4, 16},
	"m6i.large": {2, 8}, "m6i.xlarge": {4, 16}, "m6i.2xlarge": {8, 32},
	"m7i.large": {2, 8}, "m7i.xlarge": {4, 16}, "m7i.2xlarge": {8, 32},
	"c5.large": {2, 4}, "c5.xlarge": {4, 8}, "c6i.large": {2, 4}, "c6i.xlarge": {4, 8}, "c7i.large": {2, 4},
	"r5.large": {2, 16}, "r5.xlarge": {4, 32}, "r6i.large": {2, 16}, "r7i.large": {2, 16},
}

func shapeOf(instanceType string) (vcpu, memGiB int) {
	if s, ok := instanceShapes[instanceType]; ok {
		return s.vcpu, s.memGiB
	}
	return 2, 8
}

type instance struct {
	id, reservationID, ownerID   string
	instanceType, zone, subnet   string
	imageID, clientToken         string
	privateIP, privateDNS        string
	userData                     string // decoded
	profile                      string
	securityGroups               []string
	launchTime                   time.Time
	launchSeq                    uint64
	state                        string
	stateReasonCode, stateReason string
	transitionReason             string
	hibernationConfigured        bool
	rootDevice                   string
	rootGiB                      int32
	rootEncrypted                bool
	tags                         map[string]string
	visibleAt                    time.Time
	terminatedAt                 time.Time
	// gen increments on every state change; timers scheduled for an older generation are stale.
	gen           uint64
	nodeBound     bool // a Register was queued
	nodePoweredOn bool
}

type tokenRecord struct {
	params        string
	reservationID string
	instanceIDs   []string
}

type ec2State struct {
	instances map[string]*instance
	tokens    map[string]tokenRecord
	// placementScores are the Spot placement scores set by SetPlacementScore (placement.go).
	placementScores map[placementKey]int
}

func (s *ec2State) init() {
	s.instances = map[string]*instance{}
	s.tokens = map[string]tokenRecord{}
	s.placementScores = map[placementKey]int{}
}

// ec2Error is an EC2 API error response.
type ec2Error struct {
	status        int
	code, message string
}

func (e *ec2Error) Error() string { return e.code + ": " + e.message }

func clientErr(code, format string, args ...any) *ec2Error {
	return &ec2Error{status: http.StatusBadRequest, code: code, message: fmt.Sprintf(format, args...)}
}

type xmlErrorResponse struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

// apiError is the error type of an emulated API.
type apiError interface{ *ec2Error | *sqsError }

// apiWire is how an emulated API (EC2 here, SQS in sqs.go) answers a call: its injected faults
// and how it writes errors and bodies.
type apiWire[E apiError] struct {
	// fault is the injected fault that fails the call, if one fires.
	fault func(e *Emulator) E
	// code is what the request counter records for a failed call.
	code    func(err E) string
	marshal func(resp any) ([]byte, error)
	// internal is the error for a response that does not marshal.
	internal  func(err error) E
	writeErr  func(e *Emulator, w http.ResponseWriter, op string, err E)
	writeBody func(e *Emulator, w http.ResponseWriter, body []byte)
}

// serve runs one call of op under e.mu (the injected fault when one fires, else do), counts
// it by its error code, and writes the error or the response.
func (api apiWire[E]) serve(e *Emulator, w http.ResponseWriter, op string, do func() (any, E)) {
	e.mu.Lock()
	var resp any
	err := api.fault(e)
	if err == nil {
		resp, err = do()
	}
	code := ""
	if err != nil {
		code = api.code(err)
	}
	e.countLocked(op, code)
	e.mu.Unlock()
	if err != nil {
		api.writeErr(e, w, op, err)
		return
	}
	body, merr := api.marshal(resp)
	if merr != nil {
		api.writeErr(e, w, op, api.internal(merr))
		return
	}
	api.writeBody(e, w, body)
}

// ec2Wire is the EC2 Query API: XML responses.
var ec2Wire = apiWire[*ec2Error]{
	fault:    (*Emulator).ec2FaultLocked,
	code:     func(err *ec2Error) string { return err.code },
	marshal:  xml.Marshal,
	internal: func(err error) *ec2Error { return &ec2Error{status: 500, code: "InternalError", message: err.Error()} },
	writeErr: (*Emulator).writeEC2Error,
	writeBody: func(_ *Emulator, w http.ResponseWriter, body []byte) {
		w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
		_, _ = w.Write([]byte(xml.Header))
		_, _ = w.Write(body)
	},
}

func (e *Emulator) serveEC2(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		e.writeEC2Error(w, "", clientErr("MalformedQueryString", "%v", err))
		return
	}
	action := r.Form.Get("Action")
	ec2Wire.serve(e, w, action, func() (any, *ec2Error) { return e.ec2ActionLocked(action, r.Form) })
}

// ec2Actions are the EC2 actions the emulator serves.
var ec2Actions = map[string]func(e *Emulator, form url.Values) (any, *ec2Error){
	"RunInstances":       (*Emulator).runInstancesLocked,
	"DescribeInstances":  (*Emulator).describeInstancesLocked,
	"StartInstances":     (*Emulator).startInstancesLocked,
	"StopInstances":      (*Emulator).stopInstancesLocked,
	"TerminateInstances": (*Emulator).terminateInstancesLocked,
	"CreateTags":         (*Emulator).createTagsLocked,
	// Spot placement scores: placement.go.
	"GetSpotPlacementScores": (*Emulator).getSpotPlacementScoresLocked,
}

// ec2ActionLocked runs one EC2 action.
func (e *Emulator) ec2ActionLocked(action string, form url.Values) (any, *ec2Error) {
	run, ok := ec2Actions[action]
	if !ok {
		return nil, clientErr("InvalidAction", "The action %s is not valid for this web service.", action)
	}
	return run(e, form)
}

func (e *Emulator) writeEC2Error(w http.ResponseWriter, action string, err *ec2Error) {
	body, _ := xml.Marshal(xmlErrorResponse{Code: err.code, Message: err.message, RequestID: e.requestID()})
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(err.status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(body)
	e.log.V(4).Info("EC2 error", "action", action, "code", err.code, "message", err.message)
}

func (e *Emulator) ec2FaultLocked() *ec2Error {
	if e.fireLocked("ec2-throttle", e.faults.EC2Throttle) {
		return &ec2Error{status: http.StatusServiceUnavailable, code: "RequestLimitExceeded", message: "Request limit exceeded."}
	}
	if e.fireLocked("ec2-5xx", e.faults.EC2ServerError) {
		return &ec2Error{status: http.StatusInternalServerError, code: "InternalError", message: "An internal error has occurred."}
	}
	return nil
}

// ---- query parsing ----

// flatList returns prefix.1, prefix.2, … until the first missing index.
func flatList(form url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		k := prefix + "." + strconv.Itoa(i)
		if _, ok := form[k]; !ok {
			return out
		}
		out = append(out, form.Get(k))
	}
}

// flatTags reads prefix.N.Key / prefix.N.Value.
func flatTags(form url.Values, prefix string) map[string]string {
	tags := map[string]string{}
	for i := 1; ; i++ {
		k := prefix + "." + strconv.Itoa(i)
		if _, ok := form[k+".Key"]; !ok {
			return tags
		}
		tags[form.Get(k+".Key")] = form.Get(k + ".Value")
	}
}

func formInt(form url.Values, key string, def int) (int, *ec2Error) {
	v := form.Get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, clientErr("InvalidParameterValue", "Value (%s) for parameter %s is invalid.", v, key)
	}
	return n, nil
}

// canonicalParams is what idempotency compares: every parameter but the token itself.
func canonicalParams(form url.Values) string {
	keys := make([]string, 0, len(form))
	for k := range form {
		if k == "ClientToken" || k == "Action" || k == "Version" {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strings.Join(form[k], ","))
		b.WriteByte('&')
	}
	return b.String()
}

// ---- XML shapes (element names from the EC2 Query API, as aws-sdk-go-v2 deserializes them) ----

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlStateReason struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type xmlGroup struct {
	GroupID string `xml:"groupId"`
}

type xmlBlockDevice struct {
	DeviceName string `xml:"deviceName"`
	Ebs        struct {
		VolumeID            string `xml:"volumeId"`
		Status              string `xml:"status"`
		AttachTime          string `xml:"attachTime"`
		DeleteOnTermination bool   `xml:"deleteOnTermination"`
	} `xml:"ebs"`
}

type xmlInstance struct {
	InstanceID     string   `xml:"instanceId"`
	ImageID        string   `xml:"imageId"`
	State          xmlState `xml:"instanceState"`
	PrivateDNSName string   `xml:"privateDnsName"`
	DNSName        string   `xml:"dnsName"`
	Reason         string   `xml:"reason"`
	AmiLaunchIndex int      `xml:"amiLaunchIndex"`
	InstanceType   string   `xml:"instanceType"`
	LaunchTime     string   `xml:"launchTime"`
	Placement      struct {
		AvailabilityZone string `xml:"availabilityZone"`
		Tenancy          string `xml:"tenancy"`
	} `xml:"placement"`
	SubnetID           string           `xml:"subnetId,omitempty"`
	VpcID              string           `xml:"vpcId,omitempty"`
	PrivateIPAddress   string           `xml:"privateIpAddress"`
	Groups             []xmlGroup       `xml:"groupSet>item"`
	StateReason        *xmlStateReason  `xml:"stateReason,omitempty"`
	Architecture       string           `xml:"architecture"`
	RootDeviceType     string           `xml:"rootDeviceType"`
	RootDeviceName     string           `xml:"rootDeviceName"`
	BlockDevices       []xmlBlockDevice `xml:"blockDeviceMapping>item"`
	VirtualizationType string           `xml:"virtualizationType"`
	ClientToken        string           `xml:"clientToken"`
	Tags               []xmlTag         `xml:"tagSet>item"`
	Hypervisor         string           `xml:"hypervisor"`
	IamInstanceProfile *struct {
		Arn string `xml:"arn"`
		ID  string `xml:"id"`
	} `xml:"iamInstanceProfile,omitempty"`
	HibernationOptions struct {
		Configured bool `xml:"configured"`
	} `xml:"hibernationOptions"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Groups        []xmlGroup    `xml:"groupSet>item"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type xmlRunInstancesResponse struct {
	XMLName   xml.Name `xml:"RunInstancesResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	xmlReservation
}

type xmlDescribeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []xmlReservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type xmlStateChange struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  xmlState `xml:"currentState"`
	PreviousState xmlState `xml:"previousState"`
}

type xmlStateChangeResponse struct {
	XMLName   xml.Name
	Xmlns     string           `xml:"xmlns,attr"`
	RequestID string           `xml:"requestId"`
	Instances []xmlStateChange `xml:"instancesSet>item"`
}

type xmlReturnResponse struct {
	XMLName   xml.Name
	Xmlns     string `xml:"xmlns,attr"`
	RequestID string `xml:"requestId"`
	Return    bool   `xml:"return"`
}

func (e *Emulator) toXML(in *instance) xmlInstance {
	x := xmlInstance{
		InstanceID:         in.id,
		ImageID:            in.imageID,
		State:              xmlState{Code: stateCodes[in.state], Name: in.state},
		InstanceType:       in.instanceType,
		LaunchTime:         in.launchTime.UTC().Format("2006-01-02T15:04:05.000Z"),
		SubnetID:           in.subnet,
		Reason:             in.transitionReason,
		Architecture:       "x86_64",
		RootDeviceType:     "ebs",
		RootDeviceName:     in.rootDevice,
		VirtualizationType: "hvm",
		Hypervisor:         "xen",
		ClientToken:        in.clientToken,
	}
	x.Placement.AvailabilityZone = in.zone
	x.Placement.Tenancy = "default"
	if in.state != "terminated" {
		x.PrivateDNSName = in.privateDNS
		x.PrivateIPAddress = in.privateIP
		x.VpcID = "vpc-0emu"
		bd := xmlBlockDevice{DeviceName: in.rootDevice}
		bd.Ebs.VolumeID = "vol-" + strings.TrimPrefix(in.id, "i-")
		bd.Ebs.Status = "attached"
		bd.Ebs.AttachTime = x.LaunchTime
		bd.Ebs.DeleteOnTermination = true
		x.BlockDevices = []xmlBlockDevice{bd}
	}
	for _, g := range in.securityGroups {
		x.Groups = append(x.Groups, xmlGroup{GroupID: g})
	}
	if in.stateReasonCode != "" {
		x.StateReason = &xmlStateReason{Code: in.stateReasonCode, Message: in.stateReason}
	}
	if in.profile != "" {
		x.IamInstanceProfile = &struct {
			Arn string `xml:"arn"`
			ID  string `xml:"id"`
		}{Arn: "arn:aws:iam::" + e.opts.AccountID + ":instance-profile/" + in.profile, ID: "AIPAEMU" + strings.ToUpper(in.profile)}
	}
	x.HibernationOptions.Configured = in.hibernationConfigured
	keys := make([]string, 0, len(in.tags))
	for k := range in.tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		x.Tags = append(x.Tags, xmlTag{Key: k, Value: in.tags[k]})
	}
	return x
}

// ---- actions ----

// runInstancesLocked launches instances: an idempotent replay for a known client token, else
// the request validated in EC2's order (placement and root volume, then capacity, then the
// payload) and the instances created pending.
func (e *Emulator) runInstancesLocked(form url.Values) (any, *ec2Error) {
	token := form.Get("ClientToken")
	if len(token) > 64 {
		return nil, clientErr("InvalidParameterValue", "Value (%s) for parameter clientToken is invalid. The client token must be at most 64 ASCII characters.", token)
	}
	params := canonicalParams(form)
	if token != "" {
		if rec, ok := e.ec2.tokens[token]; ok {
			if rec.params != params {
				return nil, clientErr("IdempotentParameterMismatch", "Arguments on this idempotent request are inconsistent with arguments used in previous request(s).")
			}
			return e.reservationResponseLocked(rec.reservationID, rec.instanceIDs), nil
		}
	}
	req, err := e.parseRunRequest(form)
	if err != nil {
		return nil, err
	}
	if e.noCapacityLocked(false, req.instanceType, req.zone) {
		return nil, &ec2Error{status: http.StatusInternalServerError, code: "InsufficientInstanceCapacity",
			message: fmt.Sprintf("We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity.", req.instanceType, req.zone)}
	}
	if err := req.parsePayload(form); err != nil {
		return nil, err
	}
	req.clientToken = token
	reservationID, ids := e.launchLocked(req)
	if token != "" {
		e.ec2.tokens[token] = tokenRecord{params: params, reservationID: reservationID, instanceIDs: ids}
	}
	return e.reservationResponseLocked(reservationID, ids), nil
}

// runRequest is a validated RunInstances request.
type runRequest struct {
	count                 int
	instanceType, imageID string
	subnet, zone          string
	hibernation           bool
	rootDevice            string
	rootGiB               int32
	rootEncrypted         bool
	userData, profile     string
	tags                  map[string]string
	securityGroups        []string
	clientToken           string
}

// parseRunRequest validates what a RunInstances request launches and where: the counts, the
// image and instance type (or launch template), the subnet and zone, and the root volume.
func (e *Emulator) parseRunRequest(form url.Values) (runRequest, *ec2Error) {
	var req runRequest
	minCount, err := formInt(form, "MinCount", 0)
	if err != nil {
		return req, err
	}
	if req.count, err = formInt(form, "MaxCount", 0); err != nil {
		return req, err
	}
	if minCount < 1 || req.count < minCount || req.count > 100 {
		return req, clientErr("InvalidParameterValue", "MinCount (%d) and MaxCount (%d) must satisfy 1 <= MinCount <= MaxCount <= 100.", minCount, req.count)
	}
	template := form.Get("LaunchTemplate.LaunchTemplateId") + form.Get("LaunchTemplate.LaunchTemplateName")
	if req.instanceType, req.imageID, err = runImage(form, template); err != nil {
		return req, err
	}
	if req.subnet, req.zone, err = e.runPlacement(form); err != nil {
		return req, err
	}
	req.hibernation = form.Get("HibernationOptions.Configured") == "true"
	if err := req.parseRootVolume(form, template); err != nil {
		return req, err
	}
	return req, nil
}

// runImage resolves the instance type and image: both from the request, or defaults (EC2's
// without a launch template, the template's otherwise).
func runImage(form url.Values, template string) (instanceType, imageID string, err *ec2Error) {
	instanceType = form.Get("InstanceType")
	imageID = form.Get("ImageId")
	if template == "" {
		if imageID == "" {
			return "", "", clientErr("MissingParameter", "The request must contain the parameter ImageId")
		}
		if instanceType == "" {
			instanceType = "m1.small" // EC2's historical default
		}
	} else {
		if instanceType == "" {
			instanceType = "m5.large"
		}
		if imageID == "" {
			imageID = "ami-0emu" + strings.TrimPrefix(template, "lt-")
		}
	}
	return instanceType, imageID, nil
}

// runPlacement resolves the subnet and zone: the subnet's zone (which must agree with a
// requested zone), the requested zone, or the default subnet.
func (e *Emulator) runPlacement(form url.Values) (subnet, zone string, err *ec2Error) {
	subnet = form.Get("SubnetId")
	zone = form.Get("Placement.AvailabilityZone")
	if subnet != "" {
		z, ok := e.opts.Subnets[subnet]
		if !ok {
			return "", "", clientErr("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", subnet)
		}
		if zone != "" && zone != z {
			return "", "", clientErr("InvalidParameterValue", "Value (%s) for parameter availabilityZone is invalid. Subnet %s is in %s.", zone, subnet, z)
		}
		zone = z
	} else if zone == "" {
		subnet, zone = e.defaultSubnet()
	}
	return subnet, zone, nil
}

// parseRootVolume reads the root volume from the first block device mapping (a launch
// template's is assumed to satisfy hibernation) and checks it can hold a hibernation: encrypted
// and larger than the instance type's memory.
func (req *runRequest) parseRootVolume(form url.Values, template string) *ec2Error {
	req.rootDevice, req.rootGiB = "/dev/xvda", 8
	for i := 1; ; i++ {
		p := "BlockDeviceMapping." + strconv.Itoa(i)
		if _, ok := form[p+".DeviceName"]; !ok {
			break
		}
		if i != 1 {
			continue
		}
		req.rootDevice = form.Get(p + ".DeviceName")
		if v := form.Get(p + ".Ebs.VolumeSize"); v != "" {
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 1 || n > 16384 {
				return clientErr("InvalidParameterValue", "Volume size %q is invalid", v)
			}
			req.rootGiB = int32(n)
		}
		req.rootEncrypted = form.Get(p+".Ebs.Encrypted") == "true"
		if req.hibernation && !req.rootEncrypted {
			return clientErr("UnsupportedHibernationConfiguration", "Hibernation requires an encrypted root EBS volume.")
		}
		if _, mem := shapeOf(req.instanceType); req.hibernation && int(req.rootGiB) <= mem {
			return clientErr("UnsupportedHibernationConfiguration", "The root volume (%d GiB) must be larger than the RAM of %s (%d GiB) to hibernate.", req.rootGiB, req.instanceType, mem)
		}
	}
	if template != "" && form.Get("BlockDeviceMapping.1.DeviceName") == "" {
		// The template's mapping: assume it satisfies hibernation.
		req.rootEncrypted = true
		_, mem := shapeOf(req.instanceType)
		req.rootGiB = int32(mem + 20)
	}
	return nil
}

// parsePayload reads what the instances carry: user data (base64), the instance tags (no
// reserved "aws:" keys), the instance profile and the security groups.
func (req *runRequest) parsePayload(form url.Values) *ec2Error {
	if ud := form.Get("UserData"); ud != "" {
		b, derr := base64.StdEncoding.DecodeString(ud)
		if derr != nil {
			return clientErr("InvalidParameterValue", "Invalid BASE64 encoding of user data.")
		}
		req.userData = string(b)
	}
	req.tags = map[string]string{}
	for i := 1; ; i++ {
		p := "TagSpecification." + strconv.Itoa(i)
		rt, ok := form[p+".ResourceType"]
		if !ok {
			break
		}
		if len(rt) > 0 && rt[0] == "instance" {
			tags := flatTags(form, p+".Tag")
			if err := checkTagKeys(tags); err != nil {
				return err
			}
			maps.Copy(req.tags, tags)
		}
	}
	req.profile = form.Get("IamInstanceProfile.Name")
	if arn := form.Get("IamInstanceProfile.Arn"); arn != "" {
		req.profile = arn[strings.LastIndex(arn, "/")+1:]
	}
	req.securityGroups = flatList(form, "SecurityGroupId")
	return nil
}

// checkTagKeys rejects tag keys reserved for AWS ("aws:").
func checkTagKeys(tags map[string]string) *ec2Error {
	for k := range tags {
		if strings.HasPrefix(k, "aws:") {
			return clientErr("InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use")
		}
	}
	return nil
}

// noCapacityLocked: a capacity fault covers instanceType in zone, for a launch or (start) for
// a StartInstances of a stopped instance.
func (e *Emulator) noCapacityLocked(start bool, instanceType, zone string) bool {
	for _, f := range e.faults.Capacity {
		applies := f.OnRun || !f.OnStart
		if start {
			applies = f.OnStart || !f.OnRun
		}
		if applies && (f.InstanceType == "" || f.InstanceType == instanceType) && (f.Zone == "" || f.Zone == zone) {
			return true
		}
	}
	return false
}

// launchLocked creates the request's instances in one reservation, pending, and schedules
// them to run.
func (e *Emulator) launchLocked(req runRequest) (reservationID string, ids []string) {
	now := time.Now()
	reservationID = e.nextIDLocked("r")
	for i := 0; i < req.count; i++ {
		in := e.newInstanceLocked(req, reservationID, now)
		e.ec2.instances[in.id] = in
		ids = append(ids, in.id)
		e.scheduleRunningLocked(in, e.opts.Delays.Launch, e.opts.Delays.NodeBoot)
	}
	return reservationID, ids
}

// newInstanceLocked builds one pending instance of the request with a new ID and private IP.
func (e *Emulator) newInstanceLocked(req runRequest, reservationID string, now time.Time) *instance {
	id := e.nextIDLocked("i")
	ip := fmt.Sprintf("10.0.%d.%d", (e.seq/250)%250, e.seq%250+2)
	return &instance{
		id: id, reservationID: reservationID, ownerID: e.opts.AccountID,
		instanceType: req.instanceType, zone: req.zone, subnet: req.subnet,
		imageID: req.imageID, clientToken: req.clientToken,
		privateIP: ip, privateDNS: e.privateDNS(ip),
		userData: req.userData, profile: req.profile,
		securityGroups: slices.Clone(req.securityGroups),
		launchTime:     now, launchSeq: e.seq,
		state:                 "pending",
		hibernationConfigured: req.hibernation,
		rootDevice:            req.rootDevice, rootGiB: req.rootGiB, rootEncrypted: req.rootEncrypted,
		tags:      copyTags(req.tags),
		visibleAt: now.Add(e.faults.NotFoundAfterLaunch),
	}
}

func (e *Emulator) defaultSubnet() (subnet, zone string) {
	subnets := make([]string, 0, len(e.opts.Subnets))
	for s := range e.opts.Subnets {
		subnets = append(subnets, s)
	}
	sort.Strings(subnets)
	if len(subnets) == 0 {
		return "", e.opts.Region + "a"
	}
	return subnets[0], e.opts.Subnets[subnets[0]]
}

func (e *Emulator) privateDNS(ip string) string {
	name := "ip-" + strings.ReplaceAll(ip, ".", "-")
	if e.opts.Region == "us-east-1" {
		return name + ".ec2.internal"
	}
	return name + "." + e.opts.Region + ".compute.internal"
}

func copyTags(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (e *Emulator) reservationResponseLocked(reservationID string, ids []string) *xmlRunInstancesResponse {
	resp := &xmlRunInstancesResponse{Xmlns: ec2XMLNamespace, RequestID: e.requestIDLocked()}
	resp.ReservationID = reservationID
	resp.OwnerID = e.opts.AccountID
	for _, id := range ids {
		if in, ok := e.ec2.instances[id]; ok {
			resp.Instances = append(resp.Instances, e.toXML(in))
		}
	}
	return resp
}

func (e *Emulator) requestIDLocked() string {
	a := e.rng.Uint64()
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a>>32, a>>16&0xffff, a&0xffff, e.seq&0xffff, a&0xffffffffffff)
}

// scheduleRunningLocked moves a pending instance to running after d, then registers (or powers on)
// its Node after node more.
func (e *Emulator) scheduleRunningLocked(in *instance, d, node time.Duration) {
	gen := in.gen
	e.afterLocked(d, func() {
		if in.gen != gen || in.state != "pending" {
			return
		}
		in.state = "running"
		in.gen++
		runGen := in.gen
		e.afterLocked(node, func() {
			if in.gen != runGen || in.state != "running" {
				return
			}
			if !in.nodeBound {
				in.nodeBound = true
				in.nodePoweredOn = true
				e.bindLocked(opRegister, in)
				return
			}
			if !in.nodePoweredOn {
				in.nodePoweredOn = true
				e.bindLocked(opPowerOn, in)
			}
		})
	})
}

// lookupLocked resolves instance IDs the way EC2 does: an unknown ID (or one still inside the
// NotFound-after-launch window, or terminated long ago) fails the whole request.
func (e *Emulator) lookupLocked(ids []string) ([]*instance, *ec2Error) {
	now := time.Now()
	var missing []string
	out := make([]*instance, 0, len(ids))
	for _, id := range ids {
		if !strings.HasPrefix(id, "i-") {
			return nil, clientErr("InvalidInstanceID.Malformed", "Invalid id: \"%s\"", id)
		}
		in, ok := e.ec2.instances[id]
		if !ok || now.Before(in.visibleAt) || e.expiredLocked(in, now) {
			missing = append(missing, id)
			continue
		}
		out = append(out, in)
	}
	switch len(missing) {
	case 0:
		return out, nil
	case 1:
		return nil, clientErr("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", missing[0])
	default:
		return nil, clientErr("InvalidInstanceID.NotFound", "The instance IDs '%s' do not exist", strings.Join(missing, ", "))
	}
}

func (e *Emulator) expiredLocked(in *instance, now time.Time) bool {
	return in.state == "terminated" && now.Sub(in.terminatedAt) > e.opts.TerminatedRetention
}

type filter struct {
	name   string
	values []string
}

// instanceFilterFields are the filters on one field of an instance.
var instanceFilterFields = map[string]func(*instance) string{
	"client-token":        func(in *instance) string { return in.clientToken },
	"instance-state-name": func(in *instance) string { return in.state },
	"instance-id":         func(in *instance) string { return in.id },
	"instance-type":       func(in *instance) string { return in.instanceType },
	"availability-zone":   func(in *instance) string { return in.zone },
	"subnet-id":           func(in *instance) string { return in.subnet },
	"reservation-id":      func(in *instance) string { return in.reservationID },
}

// supportedFilter: DescribeInstances accepts the filter (tag:<key> filters aside).
func supportedFilter(name string) bool {
	_, ok := instanceFilterFields[name]
	return ok || name == "tag-key"
}

// matches: one of the instance's values for the filter's name matches one of its values.
func (f filter) matches(in *instance) bool {
	var got []string
	if field, ok := instanceFilterFields[f.name]; ok {
		got = []string{field(in)}
	} else if f.name == "tag-key" {
		for k := range in.tags {
			got = append(got, k)
		}
	} else if key, ok := strings.CutPrefix(f.name, "tag:"); ok {
		v, ok := in.tags[key]
		if !ok {
			return false
		}
		got = []string{v}
	}
	for _, g := range got {
		for _, want := range f.values {
			if globMatch(want, g) {
				return true
			}
		}
	}
	return false
}

// globMatch supports EC2 filter wildcards: * (any run) and ? (one character).
func globMatch(pattern, s string) bool {
	if !strings.ContainsAny(pattern, "*?") {
		return pattern == s
	}
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if globMatch(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && globMatch(pattern[1:], s[1:])
	default:
		return s != "" && s[0] == pattern[0] && globMatch(pattern[1:], s[1:])
	}
}

func (e *Emulator) describeInstancesLocked(form url.Values) (any, *ec2Error) {
	ids := flatList(form, "InstanceId")
	var filters []filter
	for i := 1; ; i++ {
		p := "Filter." + strconv.Itoa(i)
		if _, ok := form[p+".Name"]; !ok {
			break
		}
		f := filter{name: form.Get(p + ".Name"), values: flatList(form, p+".Value")}
		if !supportedFilter(f.name) && !strings.HasPrefix(f.name, "tag:") {
			return nil, clientErr("InvalidParameterValue", "The filter '%s' is invalid", f.name)
		}
		filters = append(filters, f)
	}
	maxResults, err := formInt(form, "MaxResults", 0)
	if err != nil {
		return nil, err
	}
	if maxResults != 0 && len(ids) > 0 {
		return nil, clientErr("InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")
	}
	if maxResults != 0 && (maxResults < 5 || maxResults > 1000) {
		return nil, clientErr("InvalidParameterValue", "Value ( %d ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", maxResults)
	}
	offset := 0
	if tok := form.Get("NextToken"); tok != "" {
		n, perr := strconv.Atoi(strings.TrimPrefix(tok, "emu-"))
		if perr != nil || n < 0 {
			return nil, clientErr("InvalidParameterValue", "The token '%s' is invalid", tok)
		}
		offset = n
	}
	var candidates []*instance
	if len(ids) > 0 {
		found, lerr := e.lookupLocked(ids)
		if lerr != nil {
			return nil, lerr
		}
		candidates = found
	} else {
		now := time.Now()
		for _, in := range e.ec2.instances {
			if now.Before(in.visibleAt) {
				continue
			}
			if e.expiredLocked(in, now) {
				delete(e.ec2.instances, in.id)
				continue
			}
			candidates = append(candidates, in)
		}
		sort.Slice(candidates, func(i, j int) bool { return candidates[i].launchSeq < candidates[j].launchSeq })
	}
	var matched []*instance
	for _, in := range candidates {
		ok := true
		for _, f := range filters {
			if !f.matches(in) {
				ok = false
				break
			}
		}
		if ok {
			matched = append(matched, in)
		}
	}
	resp := &xmlDescribeInstancesResponse{Xmlns: ec2XMLNamespace, RequestID: e.requestIDLocked()}
	if offset > len(matched) {
		offset = len(matched)
	}
	page := matched[offset:]
	if maxResults > 0 && len(page) > maxResults {
		page = page[:maxResults]
		resp.NextToken = "emu-" + strconv.Itoa(offset+maxResults)
	}
	// One reservation per run of consecutive instances launched together.
	for _, in := range page {
		n := len(resp.Reservations)
		if n == 0 || resp.Reservations[n-1].ReservationID != in.reservationID {
			resp.Reservations = append(resp.Reservations, xmlReservation{ReservationID: in.reservationID, OwnerID: in.ownerID})
			n++
		}
		resp.Reservations[n-1].Instances = append(resp.Reservations[n-1].Instances, e.toXML(in))
	}
	return resp, nil
}

func stateChangeResponse(action string, requestID string, changes []xmlStateChange) *xmlStateChangeResponse {
	return &xmlStateChangeResponse{XMLName: xml.Name{Local: action + "Response"}, Xmlns: ec2XMLNamespace, RequestID: requestID, Instances: changes}
}

func change(in *instance, previous string) xmlStateChange {
	return xmlStateChange{InstanceID: in.id, CurrentState: xmlState{stateCodes[in.state], in.state}, PreviousState: xmlState{stateCodes[previous], previous}}
}

// instancesParamLocked resolves a state change's InstanceId.N list, which must not be empty.
func (e *Emulator) instancesParamLocked(form url.Values) ([]*instance, *ec2Error) {
	ids := flatList(form, "InstanceId")
	if len(ids) == 0 {
		return nil, clientErr("MissingParameter", "The request must contain the parameter InstanceId")
	}
	return e.lookupLocked(ids)
}

// checkTransition checks that every instance can make a state change: it is in one of the
// states from (else IncorrectInstanceState: it cannot be verb, e.g. "started"), then passes
// check. The first failure fails the whole request.
func checkTransition(instances []*instance, verb string, from []string, check func(*instance) *ec2Error) *ec2Error {
	for _, in := range instances {
		if !slices.Contains(from, in.state) {
			return clientErr("IncorrectInstanceState", "The instance '%s' is not in a state from which it can be %s.", in.id, verb)
		}
		if err := check(in); err != nil {
			return err
		}
	}
	return nil
}

// settleLocked ends the instance's transition (stopping, shutting-down) in state to after d,
// unless its state changed meanwhile; a terminated instance records when.
func (e *Emulator) settleLocked(in *instance, d time.Duration, to string) {
	gen, from := in.gen, in.state
	e.afterLocked(d, func() {
		if in.gen == gen && in.state == from {
			in.state = to
			if to == "terminated" {
				in.terminatedAt = time.Now()
			}
			in.gen++
		}
	})
}

func (e *Emulator) startInstancesLocked(form url.Values) (any, *ec2Error) {
	instances, err := e.instancesParamLocked(form)
	if err != nil {
		return nil, err
	}
	err = checkTransition(instances, "started", []string{"pending", "running", "stopped"}, func(in *instance) *ec2Error {
		if in.state == "stopped" && e.noCapacityLocked(true, in.instanceType, in.zone) {
			return &ec2Error{status: http.StatusInternalServerError, code: "InsufficientInstanceCapacity",
				message: fmt.Sprintf("Insufficient capacity. There is not enough %s capacity in %s to start the instance.", in.instanceType, in.zone)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var changes []xmlStateChange
	for _, in := range instances {
		prev := in.state
		if prev == "stopped" {
			in.state = "pending"
			in.gen++
			in.stateReasonCode, in.stateReason, in.transitionReason = "", "", ""
			e.scheduleRunningLocked(in, e.opts.Delays.Start, e.opts.Delays.NodeResume)
		}
		changes = append(changes, change(in, prev))
	}
	return stateChangeResponse("StartInstances", e.requestIDLocked(), changes), nil
}

func (e *Emulator) stopInstancesLocked(form url.Values) (any, *ec2Error) {
	hibernate := form.Get("Hibernate") == "true"
	instances, err := e.instancesParamLocked(form)
	if err != nil {
		return nil, err
	}
	err = checkTransition(instances, "stopped", []string{"running", "stopping", "stopped"}, func(in *instance) *ec2Error {
		if hibernate && !in.hibernationConfigured {
			return clientErr("UnsupportedHibernationConfiguration", "The instance '%s' does not have hibernation enabled. Hibernation must be configured at launch.", in.id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var changes []xmlStateChange
	now := time.Now().UTC().Format("2006-01-02 15:04:05 MST")
	for _, in := range instances {
		prev := in.state
		if prev == "running" {
			in.state = "stopping"
			in.gen++
			if hibernate && !e.faults.HibernationDegrades && !e.faults.DegradeHibernationOf[in.id] {
				in.stateReasonCode, in.stateReason = "Client.UserInitiatedHibernate", "Client.UserInitiatedHibernate: User initiated hibernate"
			} else {
				in.stateReasonCode, in.stateReason = "Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown"
			}
			in.transitionReason = "User initiated (" + now + ")"
			if in.nodeBound && in.nodePoweredOn {
				in.nodePoweredOn = false
				e.bindLocked(opPowerOff, in)
			}
			e.settleLocked(in, e.opts.Delays.Stop, "stopped")
		}
		changes = append(changes, change(in, prev))
	}
	return stateChangeResponse("StopInstances", e.requestIDLocked(), changes), nil
}

func (e *Emulator) terminateInstancesLocked(form url.Values) (any, *ec2Error) {
	instances, err := e.instancesParamLocked(form)
	if err != nil {
		return nil, err
	}
	var changes []xmlStateChange
	now := time.Now()
	for _, in := range instances {
		prev := in.state
		if prev != "terminated" && prev != "shutting-down" {
			in.state = "shutting-down"
			in.gen++
			in.stateReasonCode, in.stateReason = "Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown"
			in.transitionReason = "User initiated (" + now.UTC().Format("2006-01-02 15:04:05 MST") + ")"
			if in.nodeBound {
				in.nodeBound, in.nodePoweredOn = false, false
				e.bindLocked(opRemove, in)
			}
			e.settleLocked(in, e.opts.Delays.Terminate, "terminated")
		}
		changes = append(changes, change(in, prev))
	}
	return stateChangeResponse("TerminateInstances", e.requestIDLocked(), changes), nil
}

func (e *Emulator) createTagsLocked(form url.Values) (any, *ec2Error) {
	resources := flatList(form, "ResourceId")
	tags := flatTags(form, "Tag")
	if len(resources) == 0 || len(tags) == 0 {
		return nil, clientErr("MissingParameter", "The request must contain the parameters ResourceId and Tag")
	}
	if err := checkTagKeys(tags); err != nil {
		return nil, err
	}
	var instanceIDs []string
	for _, r := range resources {
		if strings.HasPrefix(r, "i-") {
			instanceIDs = append(instanceIDs, r)
		}
	}
	instances, err := e.lookupLocked(instanceIDs)
	if err != nil {
		return nil, err
	}
	for _, in := range instances {
		for k, v := range tags {
			in.tags[k] = v
		}
	}
	return &xmlReturnResponse{XMLName: xml.Name{Local: "CreateTagsResponse"}, Xmlns: ec2XMLNamespace, RequestID: e.requestIDLocked(), Return: true}, nil
}

// InstanceView is a snapshot of an emulated instance, for tests and the simulation.
type InstanceView struct {
	ID, InstanceType, Zone, SubnetID, State string
	StateReason                             string
	PrivateDNSName, PrivateIP               string
	ClientToken                             string
	HibernationConfigured                   bool
	RootVolumeGiB                           int32
	RootEncrypted                           bool
	UserData                                string
	LaunchTime                              time.Time
	Tags                                    map[string]string
}

// Instances returns every instance the emulator knows (terminated ones included), in launch
// order. It ignores the NotFound-after-launch fault: it is the emulator's own view.
func (e *Emulator) Instances() []InstanceView {
	e.mu.Lock()
	defer e.mu.Unlock()
	all := make([]*instance, 0, len(e.ec2.instances))
	for _, in := range e.ec2.instances {
		all = append(all, in)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].launchSeq < all[j].launchSeq })
	out := make([]InstanceView, 0, len(all))
	for _, in := range all {
		out = append(out, e.viewLocked(in))
	}
	return out
}

// Instance returns one instance's snapshot.
func (e *Emulator) Instance(id string) (InstanceView, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	in, ok := e.ec2.instances[id]
	if !ok {
		return InstanceView{}, false
	}
	return e.viewLocked(in), true
}

func (e *Emulator) viewLocked(in *instance) InstanceView {
	return InstanceView{
		ID: in.id, InstanceType: in.instanceType, Zone: in.zone, SubnetID: in.subnet, State: in.state,
		StateReason: in.stateReasonCode, PrivateDNSName: in.privateDNS, PrivateIP: in.privateIP,
		ClientToken: in.clientToken, HibernationConfigured: in.hibernationConfigured,
		RootVolumeGiB: in.rootGiB, RootEncrypted: in.rootEncrypted, UserData: in.userData,
		LaunchTime: in.launchTime, Tags: copyTags(in.tags),
	}
}
