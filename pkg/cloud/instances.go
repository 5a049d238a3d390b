package cloud

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// EC2 tags on pool instances. They are the only state Lifeboat keeps in EC2, so a restarted
// controller finds its instances by them. Pool instances never carry Karpenter's tags
// (karpenter.sh/*, the kubernetes.io/cluster/<name> ownership tag): Karpenter's garbage collector
// terminates tagged instances that have no NodeClaim.
const (
	TagPool       = v1alpha1.LabelPool // lifeboat.dev/pool=<WarmPool name>
	TagSlot       = v1alpha1.Group + "/slot"
	TagGeneration = v1alpha1.Group + "/generation"
)

// Instance states as EC2 names them.
const (
	StatePending      = string(ec2types.InstanceStateNamePending)
	StateRunning      = string(ec2types.InstanceStateNameRunning)
	StateStopping     = string(ec2types.InstanceStateNameStopping)
	StateStopped      = string(ec2types.InstanceStateNameStopped)
	StateShuttingDown = string(ec2types.InstanceStateNameShuttingDown)
	StateTerminated   = string(ec2types.InstanceStateNameTerminated)
)

// EC2 StateReason codes that tell a hibernation from a plain stop.
const (
	ReasonUserInitiatedHibernate = "Client.UserInitiatedHibernate"
	ReasonUserInitiatedShutdown  = "Client.UserInitiatedShutdown"
)

// Instance is the warm pool's view of one EC2 instance.
type Instance struct {
	ID           string
	InstanceType string
	Zone         string
	// State is the EC2 state name: pending, running, stopping, stopped, shutting-down, terminated.
	State string
	// Pool, Slot and Generation come from the instance's tags. Slot and Generation are -1 when
	// the tag is missing or not a number.
	Pool                  string
	Slot, Generation      int
	LaunchTime            time.Time
	HibernationConfigured bool
	// StateReason is the EC2 StateReason code, e.g. Client.UserInitiatedHibernate or
	// Client.UserInitiatedShutdown.
	StateReason string
	// Hibernated is true when the instance is stopped and the stop was a hibernation. A stopped
	// instance with Hibernated false degraded to a plain stop: its memory is gone, resuming it is a
	// cold boot, so it should be replaced.
	Hibernated     bool
	PrivateDNSName string
	// ClientToken is the idempotency token the instance was launched with.
	ClientToken string
	Tags        map[string]string
}

// DegradedStop reports whether the instance is stopped but not hibernated (EC2 turns a failed
// hibernation into a normal stop).
func (i Instance) DegradedStop() bool { return i.State == StateStopped && !i.Hibernated }

// ProviderID is the Kubernetes providerID of the instance's Node.
func (i Instance) ProviderID() string { return "aws:///" + i.Zone + "/" + i.ID }

// LaunchRequest describes one pool instance to launch.
type LaunchRequest struct {
	Pool             string
	Slot, Generation int
	// InstanceTypes are tried in order; the next one is used when EC2 has no capacity for (or does
	// not offer) the previous one in any of the subnets.
	InstanceTypes []string
	// SubnetIDs are tried in order for each instance type. Empty: the launch template's subnet.
	SubnetIDs []string
	// LaunchTemplateID (version $Default) or ImageID must be set.
	LaunchTemplateID, ImageID string
	// InstanceProfile is the name, or the ARN, of the IAM instance profile.
	InstanceProfile  string
	SecurityGroupIDs []string
	// UserData is the raw (not base64) user data.
	UserData string
	// RootVolumeGiB sizes the encrypted root volume; it must hold the instance's RAM plus the
	// image (hibernation writes RAM to it). Required unless the launch template maps the root
	// volume.
	RootVolumeGiB int32
	// RootDeviceName is the AMI's root device; default /dev/xvda (Amazon Linux, Bottlerocket's
	// data volume differs: set it).
	RootDeviceName string
	// KMSKeyID encrypts the root volume with a customer key; empty uses the account default.
	KMSKeyID string
	// Tags are added to the instance and its volumes next to the pool tags. Keys under
	// karpenter.sh/ and kubernetes.io/cluster/ are rejected.
	Tags map[string]string
}

// Instances is the EC2 lifecycle of warm-pool instances.
type Instances interface {
	// Launch runs one instance with hibernation configured, an encrypted root volume and the pool
	// tags. The ClientToken derives from (pool, slot, generation), so a retried or repeated
	// launch never creates a second instance for the same slot and generation. It falls back
	// across InstanceTypes (and subnets) on InsufficientInstanceCapacity/Unsupported and
	// tolerates InvalidInstanceID.NotFound right after launch.
	Launch(ctx context.Context, req LaunchRequest) (*Instance, error)
	// Hibernate stops the instance with Hibernate=true.
	Hibernate(ctx context.Context, id string) error
	// Resume starts a stopped instance. On ICE the error matches ErrInsufficientCapacity.
	Resume(ctx context.Context, id string) error
	// Terminate terminates the instance; an instance that no longer exists is not an error.
	Terminate(ctx context.Context, id string) error
	// List returns the pool's instances that are not terminated.
	List(ctx context.Context, pool string) ([]Instance, error)
	// Get returns one instance; the error matches ErrNotFound when it does not exist.
	Get(ctx context.Context, id string) (*Instance, error)
}

// InstancesOptions tunes EC2Instances. Zero values take the defaults.
type InstancesOptions struct {
	// Clock is used for the eventual-consistency backoff. Default: the real clock.
	Clock clock.Clock
	// NotFoundInitialBackoff and NotFoundTimeout bound how long an instance ID that EC2 does
	// not know yet is retried (EC2's eventual consistency after RunInstances). Defaults 250ms and
	// 30s; the backoff doubles up to 5s.
	NotFoundInitialBackoff time.Duration
	NotFoundTimeout        time.Duration
	// PageSize of List's DescribeInstances pages, 5–1000. Default 1000.
	PageSize int32
}

// EC2Instances implements Instances on the EC2 API.
type EC2Instances struct {
	ec2  EC2API
	opts InstancesOptions
}

var _ Instances = (*EC2Instances)(nil)

// NewInstances returns the EC2 implementation of Instances.
func NewInstances(api EC2API, opts InstancesOptions) *EC2Instances {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.NotFoundInitialBackoff <= 0 {
		opts.NotFoundInitialBackoff = 250 * time.Millisecond
	}
	if opts.NotFoundTimeout <= 0 {
		opts.NotFoundTimeout = 30 * time.Second
	}
	if opts.PageSize < 5 || opts.PageSize > 1000 {
		opts.PageSize = 1000
	}
	return &EC2Instances{ec2: api, opts: opts}
}

// ClientToken is the RunInstances idempotency token of a pool slot's generation: the same
// inputs always give the same token (at most 64 ASCII characters, as EC2 requires), so a launch
// repeated after a timeout or a controller restart returns the instance already launched.
func ClientToken(pool string, slot, generation int) string {
	sum := sha256.Sum256([]byte(pool + "\x00" + strconv.Itoa(slot) + "\x00" + strconv.Itoa(generation)))
	return "lifeboat-" + hex.EncodeToString(sum[:])[:48]
}

func (r *LaunchRequest) validate() error {
	switch {
	case r.Pool == "":
		return errors.New("launch request: pool is required")
	case len(r.InstanceTypes) == 0:
		return errors.New("launch request: at least one instance type is required")
	case r.LaunchTemplateID == "" && r.ImageID == "":
		return errors.New("launch request: set a launch template or an image ID")
	case r.LaunchTemplateID == "" && r.RootVolumeGiB <= 0:
		return errors.New("launch request: RootVolumeGiB is required without a launch template (hibernation needs an encrypted root volume larger than RAM)")
	case r.Slot < 0 || r.Generation < 0:
		return errors.New("launch request: slot and generation must not be negative")
	}
	for k := range r.Tags {
		if isForeignOwnedTag(k) {
			return fmt.Errorf("launch request: tag %q is reserved for Karpenter or the cluster; pool instances must not carry it", k)
		}
	}
	return nil
}

func isForeignOwnedTag(key string) bool {
	return strings.HasPrefix(key, "karpenter.sh/") || strings.HasPrefix(key, "karpenter.k8s.aws/") || strings.HasPrefix(key, "kubernetes.io/cluster/") ||
		key == "eks:eks-cluster-name"
}

// Launch implements Instances.
func (p *EC2Instances) Launch(ctx context.Context, req LaunchRequest) (*Instance, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	log := klog.FromContext(ctx).WithValues("pool", req.Pool, "slot", req.Slot, "generation", req.Generation)
	token := ClientToken(req.Pool, req.Slot, req.Generation)
	subnets := req.SubnetIDs
	if len(subnets) == 0 {
		subnets = []string{""}
	}
	var capacityErrs []error
	for _, instanceType := range req.InstanceTypes {
		for _, subnet := range subnets {
			out, err := p.ec2.RunInstances(ctx, p.runInstancesInput(req, token, instanceType, subnet))
			switch {
			case err == nil && len(out.Instances) > 0:
				inst := fromEC2(out.Instances[0])
				log.V(2).Info("Launched instance", "instance", inst.ID, "instanceType", inst.InstanceType, "zone", inst.Zone)
				return p.awaitVisible(ctx, inst)
			case err == nil:
				return nil, fmt.Errorf("launch %s slot %d: RunInstances returned no instance", req.Pool, req.Slot)
			case ErrorCode(err) == CodeIdempotentParameterMismatch:
				// The token already launched an instance with other parameters: an earlier
				// attempt (before a restart, or with an earlier fallback type) succeeded. That
				// instance is the slot's; never launch a second one.
				inst, findErr := p.findByClientToken(ctx, token)
				if findErr != nil {
					return nil, fmt.Errorf("launch %s slot %d: token already used and its instance not found: %w", req.Pool, req.Slot, errors.Join(err, findErr))
				}
				log.V(2).Info("Launch already done under this client token", "instance", inst.ID)
				return inst, nil
			case isCapacityError(err):
				log.V(2).Info("No capacity, trying the next instance type or subnet", "instanceType", instanceType, "subnet", subnet, "code", ErrorCode(err))
				capacityErrs = append(capacityErrs, fmt.Errorf("%s in %s: %w", instanceType, subnetOrDefault(subnet), err))
			default:
				return nil, fmt.Errorf("launch %s slot %d as %s: %w", req.Pool, req.Slot, instanceType, err)
			}
		}
	}
	return nil, fmt.Errorf("launch %s slot %d: every instance type and subnet failed: %w: %w", req.Pool, req.Slot, ErrInsufficientCapacity, errors.Join(capacityErrs...))
}

func subnetOrDefault(s string) string {
	if s == "" {
		return "the launch template's subnet"
	}
	return s
}

func (p *EC2Instances) runInstancesInput(req LaunchRequest, token, instanceType, subnet string) *ec2.RunInstancesInput {
	tags := poolTags(req)
	in := &ec2.RunInstancesInput{
		ClientToken:        aws.String(token),
		MinCount:           aws.Int32(1),
		MaxCount:           aws.Int32(1),
		InstanceType:       ec2types.InstanceType(instanceType),
		HibernationOptions: &ec2types.HibernationOptionsRequest{Configured: aws.Bool(true)},
		TagSpecifications: []ec2types.TagSpecification{
			{ResourceType: ec2types.ResourceTypeInstance, Tags: tags},
			{ResourceType: ec2types.ResourceTypeVolume, Tags: tags},
		},
	}
	if subnet != "" {
		in.SubnetId = aws.String(subnet)
	}
	if req.LaunchTemplateID != "" {
		in.LaunchTemplate = &ec2types.LaunchTemplateSpecification{LaunchTemplateId: aws.String(req.LaunchTemplateID), Version: aws.String("$Default")}
	}
	if req.ImageID != "" {
		in.ImageId = aws.String(req.ImageID)
	}
	if req.InstanceProfile != "" {
		if strings.HasPrefix(req.InstanceProfile, "arn:") {
			in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Arn: aws.String(req.InstanceProfile)}
		} else {
			in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Name: aws.String(req.InstanceProfile)}
		}
	}
	if len(req.SecurityGroupIDs) > 0 {
		in.SecurityGroupIds = append([]string(nil), req.SecurityGroupIDs...)
	}
	if req.UserData != "" {
		in.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte(req.UserData)))
	}
	if req.RootVolumeGiB > 0 {
		device := req.RootDeviceName
		if device == "" {
			device = "/dev/xvda"
		}
		ebs := &ec2types.EbsBlockDevice{
			VolumeSize:          aws.Int32(req.RootVolumeGiB),
			VolumeType:          ec2types.VolumeTypeGp3,
			Encrypted:           aws.Bool(true),
			DeleteOnTermination: aws.Bool(true),
		}
		if req.KMSKeyID != "" {
			ebs.KmsKeyId = aws.String(req.KMSKeyID)
		}
		in.BlockDeviceMappings = []ec2types.BlockDeviceMapping{{DeviceName: aws.String(device), Ebs: ebs}}
	}
	return in
}

func poolTags(req LaunchRequest) []ec2types.Tag {
	tags := []ec2types.Tag{
		{Key: aws.String(TagPool), Value: aws.String(req.Pool)},
		{Key: aws.String(TagSlot), Value: aws.String(strconv.Itoa(req.Slot))},
		{Key: aws.String(TagGeneration), Value: aws.String(strconv.Itoa(req.Generation))},
	}
	if _, ok := req.Tags["Name"]; !ok {
		tags = append(tags, ec2types.Tag{Key: aws.String("Name"), Value: aws.String(fmt.Sprintf("lifeboat-%s-%d", req.Pool, req.Slot))})
	}
	for _, k := range slices.Sorted(maps.Keys(req.Tags)) {
		if k == TagPool || k == TagSlot || k == TagGeneration {
			continue
		}
		tags = append(tags, ec2types.Tag{Key: aws.String(k), Value: aws.String(req.Tags[k])})
	}
	return tags
}

// awaitVisible waits until DescribeInstances knows the new instance: EC2 is eventually
// consistent, and the instance ID returned by RunInstances can be InvalidInstanceID.NotFound for
// a few seconds. If it never shows up within the window, the launch still succeeded: the
// instance from RunInstances is returned and later calls tolerate NotFound the same way.
func (p *EC2Instances) awaitVisible(ctx context.Context, launched Instance) (*Instance, error) {
	var inst *Instance
	err := p.retryNotFound(ctx, func() error {
		var err error
		inst, err = p.Get(ctx, launched.ID)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		klog.FromContext(ctx).Info("Launched instance not visible yet; continuing with the launch response", "instance", launched.ID)
		return &launched, nil
	}
	if err != nil {
		// The instance exists; the caller gets it with the error so it can record the ID.
		return &launched, fmt.Errorf("describe launched instance %s: %w", launched.ID, err)
	}
	return inst, nil
}

func (p *EC2Instances) findByClientToken(ctx context.Context, token string) (*Instance, error) {
	out, err := p.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{
		Filters: []ec2types.Filter{{Name: aws.String("client-token"), Values: []string{token}}},
	})
	if err != nil {
		return nil, err
	}
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			inst := fromEC2(i)
			if inst.State != StateTerminated && inst.State != StateShuttingDown {
				return &inst, nil
			}
		}
	}
	return nil, ErrNotFound
}

// Get implements Instances. It does not wait out EC2's eventual consistency: an ID unknown to
// EC2 is ErrNotFound at once.
func (p *EC2Instances) Get(ctx context.Context, id string) (*Instance, error) {
	out, err := p.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", id, classify(err))
	}
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			if aws.ToString(i.InstanceId) == id {
				inst := fromEC2(i)
				return &inst, nil
			}
		}
	}
	return nil, fmt.Errorf("describe %s: %w", id, ErrNotFound)
}

// Hibernate implements Instances.
func (p *EC2Instances) Hibernate(ctx context.Context, id string) error {
	err := p.retryNotFound(ctx, func() error {
		_, err := p.ec2.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}, Hibernate: aws.Bool(true)})
		return err
	})
	if err != nil {
		return fmt.Errorf("hibernate %s: %w", id, classify(err))
	}
	return nil
}

// Resume implements Instances.
func (p *EC2Instances) Resume(ctx context.Context, id string) error {
	err := p.retryNotFound(ctx, func() error {
		_, err := p.ec2.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
		return err
	})
	if err != nil {
		return fmt.Errorf("resume %s: %w", id, classify(err))
	}
	return nil
}

// Terminate implements Instances.
func (p *EC2Instances) Terminate(ctx context.Context, id string) error {
	err := p.retryNotFound(ctx, func() error {
		_, err := p.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
		return err
	})
	if isNotFound(err) {
		// Still unknown after the consistency window: gone long ago (EC2 forgets terminated
		// instances after about an hour). Nothing left to terminate.
		return nil
	}
	if err != nil {
		return fmt.Errorf("terminate %s: %w", id, classify(err))
	}
	return nil
}

// List implements Instances.
func (p *EC2Instances) List(ctx context.Context, pool string) ([]Instance, error) {
	pager := ec2.NewDescribeInstancesPaginator(p.ec2, &ec2.DescribeInstancesInput{
		Filters: []ec2types.Filter{
			{Name: aws.String("tag:" + TagPool), Values: []string{pool}},
			{Name: aws.String("instance-state-name"), Values: []string{StatePending, StateRunning, StateStopping, StateStopped, StateShuttingDown}},
		},
		MaxResults: aws.Int32(p.opts.PageSize),
	})
	var instances []Instance
	for pager.HasMorePages() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list instances of pool %s: %w", pool, err)
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				inst := fromEC2(i)
				if inst.State == StateTerminated {
					continue
				}
				instances = append(instances, inst)
			}
		}
	}
	return instances, nil
}

// retryNotFound calls fn until it returns something other than InvalidInstanceID.NotFound or the
// consistency window has passed. The SDK's retryer does not retry NotFound (it is not transient
// for EC2 in general), only Lifeboat knows the ID is fresh.
func (p *EC2Instances) retryNotFound(ctx context.Context, fn func() error) error {
	deadline := p.opts.Clock.Now().Add(p.opts.NotFoundTimeout)
	backoff := p.opts.NotFoundInitialBackoff
	for {
		err := fn()
		if !errors.Is(err, ErrNotFound) && !isNotFound(err) || !p.opts.Clock.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-p.opts.Clock.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func classify(err error) error {
	switch ErrorCode(err) {
	case CodeInsufficientInstanceCapacity, CodeInsufficientCapacity:
		return fmt.Errorf("%w: %w", ErrInsufficientCapacity, err)
	case CodeInstanceNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case CodeIncorrectInstanceState:
		return fmt.Errorf("%w: %w", ErrIncorrectState, err)
	case CodeUnsupportedHibernation:
		return fmt.Errorf("%w: %w", ErrHibernationUnsupported, err)
	}
	return err
}

func fromEC2(i ec2types.Instance) Instance {
	inst := Instance{
		ID:             aws.ToString(i.InstanceId),
		InstanceType:   string(i.InstanceType),
		LaunchTime:     aws.ToTime(i.LaunchTime),
		PrivateDNSName: aws.ToString(i.PrivateDnsName),
		ClientToken:    aws.ToString(i.ClientToken),
		Slot:           -1,
		Generation:     -1,
		Tags:           make(map[string]string, len(i.Tags)),
	}
	if i.Placement != nil {
		inst.Zone = aws.ToString(i.Placement.AvailabilityZone)
	}
	if i.State != nil {
		inst.State = string(i.State.Name)
	}
	if i.HibernationOptions != nil {
		inst.HibernationConfigured = aws.ToBool(i.HibernationOptions.Configured)
	}
	if i.StateReason != nil {
		inst.StateReason = aws.ToString(i.StateReason.Code)
	}
	inst.Hibernated = inst.State == StateStopped && inst.StateReason == ReasonUserInitiatedHibernate
	for _, t := range i.Tags {
		inst.Tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	inst.Pool = inst.Tags[TagPool]
	if v, err := strconv.Atoi(inst.Tags[TagSlot]); err == nil {
		inst.Slot = v
	}
	if v, err := strconv.Atoi(inst.Tags[TagGeneration]); err == nil {
		inst.Generation = v
	}
	return inst
}
