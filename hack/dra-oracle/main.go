// Command dra-oracle answers DRA questions with the real Kubernetes v1.36.3 code:
// CEL device selectors (k8s.io/dynamic-resource-allocation/cel) and the structured
// allocator (k8s.io/dynamic-resource-allocation/structured), configured the way
// kube-scheduler v1.36.3 configures them with its default feature gates.
//
// It reads JSON requests from stdin and writes one JSON answer per request, one per
// line, to stdout. See README.md for the protocol.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	resourcedefaults "k8s.io/kubernetes/pkg/apis/resource/v1"
	_ "k8s.io/kubernetes/pkg/features" // registers the v1.36 feature gates and their defaults
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	sigsjson "sigs.k8s.io/json"
)

// request is the union of all request kinds; Mode selects the kind.
type request struct {
	Mode    string `json:"mode"`
	Comment string `json:"comment,omitempty"` // ignored; for humans reading testdata

	// FeatureGates overrides kube-scheduler's default feature gates for this request
	// (like kube-scheduler --feature-gates). Empty = v1.36.3 defaults.
	FeatureGates map[string]bool `json:"featureGates,omitempty"`

	// mode "cel"
	Expressions []string    `json:"expressions,omitempty"`
	Devices     []celDevice `json:"devices,omitempty"`

	// mode "allocate"
	Node            json.RawMessage             `json:"node,omitempty"`
	DeviceClasses   []resourceapi.DeviceClass   `json:"deviceClasses,omitempty"`
	ResourceSlices  []resourceapi.ResourceSlice `json:"resourceSlices,omitempty"`
	AllocatedClaims []resourceapi.ResourceClaim `json:"allocatedClaims,omitempty"`
	Claims          []resourceapi.ResourceClaim `json:"claims,omitempty"`
	// Repeat > 1 calls Allocate that many times on the same allocator (as
	// kube-scheduler's Filter does once per node) and reports every duration in
	// elapsedMicrosRuns; the answer is the first call's.
	Repeat int `json:"repeat,omitempty"`
}

// celDevice is the input of a selector: a resource.k8s.io/v1 Device's driver,
// attributes and capacity. Extra fields of a v1 Device (name, taints, ...) are
// accepted and ignored.
type celDevice struct {
	Driver                   string                                                    `json:"driver"`
	Name                     string                                                    `json:"name,omitempty"`
	AllowMultipleAllocations *bool                                                     `json:"allowMultipleAllocations,omitempty"`
	Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes,omitempty"`
	Capacity                 map[resourceapi.QualifiedName]capacityValue               `json:"capacity,omitempty"`
}

// capacityValue accepts both the v1 shape {"value": "16Gi", ...} and a bare
// quantity ("16Gi" or 16).
type capacityValue struct {
	resourceapi.DeviceCapacity
}

func (c *capacityValue) UnmarshalJSON(data []byte) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		// Decode the inner struct without recursing into this method.
		return json.Unmarshal(trimmed, &c.DeviceCapacity)
	}
	var q resource.Quantity
	if err := q.UnmarshalJSON(trimmed); err != nil {
		return fmt.Errorf("capacity: %w", err)
	}
	c.DeviceCapacity = resourceapi.DeviceCapacity{Value: q}
	return nil
}

// answer is marshalled as a JSON object with exactly the keys that are set.
type answer map[string]any

func main() {
	klog.InitFlags(nil) // -v=6/7 traces the allocator on stderr
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: dra-oracle [-v=N] < requests.json > answers.json\n"+
			"Reads one or more JSON requests ({\"mode\": \"cel\"|\"allocate\"|\"features\", ...} or {\"batch\": [...]})\n"+
			"from stdin and writes one JSON answer line per request. See hack/dra-oracle/README.md.\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}

	dec := json.NewDecoder(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	n := 0
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// The stream is unusable after a syntax error: answer and stop.
			_ = out.Encode(answer{"error": "bad request: " + err.Error(), "errorKind": "request"})
			os.Exit(1)
		}
		n++
		if err := out.Encode(handleTop(raw)); err != nil {
			fmt.Fprintf(os.Stderr, "dra-oracle: write answer: %v\n", err)
			os.Exit(1)
		}
	}
	if n == 0 {
		_ = out.Encode(answer{"error": "bad request: no JSON request on stdin", "errorKind": "request"})
		os.Exit(1)
	}
	klog.Flush()
}

// handleTop answers one top-level JSON value: a request or {"batch": [...]}.
func handleTop(raw json.RawMessage) any {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return answer{"error": "bad request: " + err.Error(), "errorKind": "request"}
	}
	if batch, ok := top["batch"]; ok {
		if len(top) != 1 {
			return answer{"error": `bad request: "batch" must be the only key`, "errorKind": "request"}
		}
		var items []json.RawMessage
		if err := json.Unmarshal(batch, &items); err != nil {
			return answer{"error": "bad request: batch: " + err.Error(), "errorKind": "request"}
		}
		answers := make([]answer, len(items))
		for i, item := range items {
			answers[i] = handle(item)
		}
		return map[string]any{"batch": answers}
	}
	return handle(raw)
}

// handle answers one request. A panic in upstream code becomes an error answer so
// that one bad request does not lose the rest of a batch.
func handle(raw json.RawMessage) (ans answer) {
	defer func() {
		if r := recover(); r != nil {
			ans = answer{"error": fmt.Sprintf("internal error: panic: %v\n%s", r, debug.Stack()), "errorKind": "internal"}
		}
	}()

	var req request
	strictErrs, err := sigsjson.UnmarshalStrict(raw, &req, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return answer{"error": "bad request: " + err.Error(), "errorKind": "request"}
	}
	var warnings []string
	for _, e := range strictErrs {
		warnings = append(warnings, e.Error())
	}

	cfg, err := configFor(req.FeatureGates)
	if err != nil {
		return answer{"error": "bad request: featureGates: " + err.Error(), "errorKind": "request"}
	}

	switch req.Mode {
	case "cel":
		ans = handleCEL(&req, cfg)
	case "allocate":
		ans = handleAllocate(&req, cfg)
	case "features":
		ans = answer{
			"allocatorFeatures":     cfg.allocatorFeatures,
			"allocatorFeatureNames": sets.List(cfg.allocatorFeatures.Set()),
			"allocator":             cfg.allocatorVariant,
			"celFeatures":           cfg.celFeatures,
			"schedulerFeatureGates": cfg.gates,
			"allocatedStateFrom":    allocatedStateFrom(cfg),
		}
	default:
		return answer{"error": fmt.Sprintf(`bad request: unknown mode %q (want "cel", "allocate" or "features")`, req.Mode), "errorKind": "request"}
	}
	if len(warnings) > 0 {
		ans["warnings"] = warnings
	}
	return ans
}

// config is what kube-scheduler derives from its feature gates.
type config struct {
	schedulerFeatures feature.Features
	allocatorFeatures structured.Features
	celFeatures       cel.Features
	celCache          *cel.Cache
	allocatorVariant  string
	gates             map[string]bool // the DRA gates, for the "features" answer
}

var (
	configMutex sync.Mutex
	configs     = map[string]*config{}
)

// configFor mirrors kube-scheduler: feature.NewSchedulerFeaturesFromGates(DefaultFeatureGate)
// (pkg/scheduler/framework/plugins/feature), dynamicresources.AllocatorFeatures(fts) for
// the allocator and cel.NewCache(10, cel.Features{...}) from dynamicresources.New.
// The CEL cache lives as long as the process, like the plugin's.
func configFor(overrides map[string]bool) (*config, error) {
	keys := make([]string, 0, len(overrides))
	for k, v := range overrides {
		keys = append(keys, fmt.Sprintf("%s=%t", k, v))
	}
	sort.Strings(keys)
	key := strings.Join(keys, ",")

	configMutex.Lock()
	defer configMutex.Unlock()
	if c, ok := configs[key]; ok {
		return c, nil
	}

	var fg featuregate.FeatureGate = utilfeature.DefaultFeatureGate
	if len(overrides) > 0 {
		mutable := utilfeature.DefaultMutableFeatureGate.DeepCopy()
		if err := mutable.SetFromMap(overrides); err != nil {
			return nil, err
		}
		fg = mutable
	}
	fts := feature.NewSchedulerFeaturesFromGates(fg)
	c := &config{
		schedulerFeatures: fts,
		allocatorFeatures: dynamicresources.AllocatorFeatures(fts),
		celFeatures: cel.Features{
			EnableConsumableCapacity: fts.EnableDRAConsumableCapacity,
			EnableListTypeAttributes: fts.EnableDRAListTypeAttributes,
		},
		gates: map[string]bool{},
	}
	c.celCache = cel.NewCache(10, c.celFeatures)
	for name := range fg.(featuregate.MutableVersionedFeatureGate).GetAll() {
		if strings.HasPrefix(string(name), "DRA") || name == "DynamicResourceAllocation" {
			c.gates[string(name)] = fg.Enabled(name)
		}
	}
	// Which of stable/incubating/experimental NewAllocator picks for this feature set.
	a, err := structured.NewAllocator(context.Background(), c.allocatorFeatures, emptyState(), classLister{}, nil, c.celCache)
	if err != nil {
		return nil, err
	}
	c.allocatorVariant = allocatorVariant(a)
	configs[key] = c
	return c, nil
}

func emptyState() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

// allocatorVariant returns "stable", "incubating" or "experimental" from the
// implementation type (*incubating.Allocator etc.).
func allocatorVariant(a structured.Allocator) string {
	t := reflect.TypeOf(a)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	return pkg[strings.LastIndex(pkg, "/")+1:]
}

// allocateOneCalls reads the allocator's search-effort counter (AllocatorExtended.GetStats,
// whose result type is internal to the structured package), or -1.
func allocateOneCalls(a structured.Allocator) int64 {
	m := reflect.ValueOf(a).MethodByName("GetStats")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
		return -1
	}
	f := m.Call(nil)[0].FieldByName("NumAllocateOneInvocations")
	if !f.IsValid() || f.Kind() != reflect.Int64 {
		return -1
	}
	return f.Int()
}

// ---- mode "cel" ----

func handleCEL(req *request, cfg *config) answer {
	results := make([]any, len(req.Expressions))
	compileErrors := make([]any, len(req.Expressions))
	for i, expression := range req.Expressions {
		// Same call as the allocator's selectorsMatch: cached compile without cost
		// estimation, runtime cost limit resourceapi.CELSelectorExpressionMaxCost.
		expr := cfg.celCache.GetOrCompile(expression)
		if expr.Error != nil {
			compileErrors[i] = expr.Error.Error()
			results[i] = nil
			continue
		}
		perDevice := make([]answer, len(req.Devices))
		for j, d := range req.Devices {
			capacity := make(map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, len(d.Capacity))
			for name, c := range d.Capacity {
				capacity[name] = c.DeviceCapacity
			}
			matches, _, err := expr.DeviceMatches(context.Background(), cel.Device{
				Driver:                   d.Driver,
				AllowMultipleAllocations: d.AllowMultipleAllocations,
				Attributes:               d.Attributes,
				Capacity:                 capacity,
			})
			if err != nil {
				perDevice[j] = answer{"error": err.Error()}
			} else {
				perDevice[j] = answer{"match": matches}
			}
		}
		results[i] = perDevice
	}
	return answer{"results": results, "compileErrors": compileErrors}
}

// ---- mode "allocate" ----

// classLister serves DeviceClasses like the scheduler's informer-backed lister.
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	classes := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		classes = append(classes, c)
	}
	sort.Slice(classes, func(i, j int) bool { return classes[i].Name < classes[j].Name })
	return classes, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

func parseNode(raw json.RawMessage) (*v1.Node, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("missing (want a v1 Node object or a node name)")
	}
	if raw[0] == '"' {
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return nil, err
		}
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
	}
	var node v1.Node
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &node); err != nil {
		return nil, err
	}
	if node.Name == "" {
		return nil, errors.New("metadata.name is required")
	}
	return &node, nil
}

func handleAllocate(req *request, cfg *config) answer {
	node, err := parseNode(req.Node)
	if err != nil {
		return answer{"error": "bad request: node: " + err.Error(), "errorKind": "request"}
	}

	// The apiserver defaults what it stores (allocationMode ExactCount, count 1,
	// toleration operator Equal, ...); kube-scheduler only ever sees defaulted
	// objects, so apply the same defaulting functions here.
	classes := classLister{}
	for i := range req.DeviceClasses {
		c := &req.DeviceClasses[i]
		classes[c.Name] = c
	}
	slices := make([]*resourceapi.ResourceSlice, len(req.ResourceSlices))
	for i := range req.ResourceSlices {
		resourcedefaults.SetObjectDefaults_ResourceSlice(&req.ResourceSlices[i])
		slices[i] = &req.ResourceSlices[i]
	}
	claims := make([]*resourceapi.ResourceClaim, len(req.Claims))
	for i := range req.Claims {
		resourcedefaults.SetObjectDefaults_ResourceClaim(&req.Claims[i])
		claims[i] = &req.Claims[i]
	}
	for i := range req.AllocatedClaims {
		resourcedefaults.SetObjectDefaults_ResourceClaim(&req.AllocatedClaims[i])
	}

	state := gatherAllocatedState(req.AllocatedClaims, cfg.schedulerFeatures.EnableDRAConsumableCapacity)

	ctx := context.Background()
	startNew := time.Now()
	allocator, err := structured.NewAllocator(ctx, cfg.allocatorFeatures, state, classes, slices, cfg.celCache)
	newMicros := time.Since(startNew).Microseconds()
	if err != nil {
		return answer{"error": err.Error(), "errorKind": "allocate", "newAllocatorMicros": newMicros}
	}
	start := time.Now()
	results, err := allocator.Allocate(ctx, node, claims)
	elapsed := time.Since(start).Microseconds()

	ans := answer{
		"elapsedMicros":      elapsed,
		"newAllocatorMicros": newMicros,
		"allocator":          allocatorVariant(allocator),
		"allocateOneCalls":   allocateOneCalls(allocator),
	}
	if req.Repeat > 1 {
		runs := []int64{elapsed}
		for i := 1; i < req.Repeat; i++ {
			start := time.Now()
			_, _ = allocator.Allocate(ctx, node, claims)
			runs = append(runs, time.Since(start).Microseconds())
		}
		ans["elapsedMicrosRuns"] = runs
	}
	switch {
	case err != nil:
		ans["error"] = err.Error()
		// kube-scheduler's Filter: ErrFailedAllocationOnNode -> Unschedulable on this
		// node only; any other error -> Error status for the pod (scheduling aborted).
		if errors.Is(err, structured.ErrFailedAllocationOnNode) {
			ans["errorKind"] = "failedOnNode"
		} else {
			ans["errorKind"] = "allocate"
		}
	case len(results) != len(claims):
		// Allocate returns nil when the claims do not fit on this node.
		ans["allocations"] = nil
	default:
		ans["allocations"] = results
	}
	return ans
}

// gatherAllocatedState mirrors kube-scheduler's claimTracker.GatherAllocatedState
// (DRAConsumableCapacity on) resp. ListAllAllocatedDevices (off), fed by
// allocatedDevices.addDevices / foreachAllocatedDevice
// (pkg/scheduler/framework/plugins/dynamicresources/{dra_manager,allocateddevices}.go):
//   - results with adminAccess=true are not "allocated" and skipped;
//   - with consumable capacity, a result with a shareID records the SharedDeviceID
//     and, if it has consumedCapacity, adds that to AggregatedCapacity;
//   - every other result marks its DeviceID as allocated.
//
// Counters consumed by allocated partitionable devices are not part of the state:
// the allocator derives them itself from the slices (checkAvailableCounters walks
// every device of the pool and subtracts consumesCounters of each device that
// IsDeviceAllocated reports as allocated).
func gatherAllocatedState(claims []resourceapi.ResourceClaim, consumableCapacity bool) structured.AllocatedState {
	state := emptyState()
	for i := range claims {
		claim := &claims[i]
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if result.AdminAccess != nil && *result.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if result.ShareID != nil {
				if consumableCapacity {
					state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, result.ShareID))
					if result.ConsumedCapacity != nil {
						state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
					}
					continue
				}
				// GatherAllocatedState with the gate off folds shared devices
				// into the dedicated set.
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

// allocatedStateFrom names the kube-scheduler function whose result gatherAllocatedState mirrors.
func allocatedStateFrom(cfg *config) string {
	if cfg.schedulerFeatures.EnableDRAConsumableCapacity {
		return "GatherAllocatedState"
	}
	return "ListAllAllocatedDevices"
}
