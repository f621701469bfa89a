// Command bare-binder binds every pod of its scheduler name, as soon as it sees it, to the
// next node in round-robin order. It does no scheduling at all: no filtering, no scoring,
// no capacity accounting, no gangs, no topology, no Events, no status writes; nodes may be
// over-committed. It is bench/e2e's `bare` contestant: the fastest any scheduler could bind
// through this apiserver with this many writes in flight, so that gangsched's bound pods/s
// can be read as a fraction of the apiserver's limit rather than of a Python one.
//
// What it runs, all client-go v0.36.3:
//   - a pod informer on spec.schedulerName=<name>,spec.nodeName= (optionally one namespace);
//     each pod it adds goes into a workqueue (deduplicated by namespace/name);
//   - a node informer (optionally narrowed by a label selector) whose names, sorted, are the
//     round-robin ring (rebuilt lazily after a node is added or deleted);
//   - -workers goroutines, each taking a pod off the queue and POSTing its pods/binding.
//
// Two flags make it the yardstick of a scheduler on a big cluster (issue 27, bench/startup.py):
//   - -events: after each Binding, one core/v1 Event on the pod (type Normal, reason Scheduled,
//     "Successfully assigned <ns>/<pod> to <node>"), as gangsched and kube-scheduler post. Like
//     gangsched's, Events never hold up a Binding: a bound pod goes into a second queue that
//     -event-workers goroutines drain (default a quarter of -workers, gangsched's share of its
//     writes in flight for best-effort writes);
//   - -all-pods: the pod informer lists and watches every pod of the cluster, as a scheduler
//     must to count what the nodes hold, instead of only its own unbound ones (filtered on
//     the client then). Start-up and memory then grow with the cluster's pods, as a
//     scheduler's do.
//
// No client-side rate limit (QPS -1: client-go builds no token bucket), like gangsched,
// whose only limit is its number of writes in flight (--concurrency). Requests use protobuf,
// as kube-scheduler's do. See README.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

type options struct {
	kubeconfig    string
	schedulerName string
	namespace     string
	nodeSelector  string
	workers       int
	contentType   string
	events        bool
	eventWorkers  int
	allPods       bool
}

// ring is the round-robin over the nodes' names: rebuilt from the lister, sorted, the first
// time it is used after a node was added or deleted.
type ring struct {
	lister corelisters.NodeLister
	dirty  atomic.Bool
	mu     sync.Mutex
	names  atomic.Pointer[[]string]
	next   atomic.Uint64
}

func (r *ring) pick() (string, error) {
	if r.dirty.Load() {
		r.mu.Lock()
		if r.dirty.Swap(false) {
			list, err := r.lister.List(labels.Everything()) // the informer holds only -node-selector's nodes
			if err != nil {
				r.dirty.Store(true)
				r.mu.Unlock()
				return "", err
			}
			names := make([]string, 0, len(list))
			for _, n := range list {
				if n.DeletionTimestamp == nil {
					names = append(names, n.Name)
				}
			}
			sort.Strings(names)
			r.names.Store(&names)
		}
		r.mu.Unlock()
	}
	names := r.names.Load()
	if names == nil {
		// The first ring is being built by another worker (it holds the lock): wait for it,
		// rather than fail and go through the workqueue's 10/s retry bucket.
		r.mu.Lock()
		names = r.names.Load()
		r.mu.Unlock()
	}
	if names == nil || len(*names) == 0 {
		return "", fmt.Errorf("no nodes")
	}
	i := r.next.Add(1) - 1
	return (*names)[i%uint64(len(*names))], nil
}

type binder struct {
	client kubernetes.Interface
	pods   corelisters.PodLister
	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
	ring   *ring
	// With -events: the pods bound, for the event workers; nil without.
	events   *workqueue.Typed[scheduled]
	instance string // the Events' reportingInstance: the host name

	bound, conflicts, gone, retries atomic.Int64
	eventsPosted, eventsFailed      atomic.Int64
}

// scheduled is a pod just bound: what its Scheduled Event says.
type scheduled struct {
	namespace, name string
	uid             types.UID
	node            string
}

func (b *binder) work(ctx context.Context) {
	for b.one(ctx) {
	}
}

func (b *binder) one(ctx context.Context) bool {
	key, quit := b.queue.Get()
	if quit {
		return false
	}
	defer b.queue.Done(key)
	pod, err := b.pods.Pods(key.Namespace).Get(key.Name)
	if err != nil || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		// Gone from the informer: bound (it no longer matches spec.nodeName=) or deleted.
		b.queue.Forget(key)
		return true
	}
	node, err := b.ring.pick()
	if err != nil {
		b.retries.Add(1)
		b.queue.AddRateLimited(key)
		return true
	}
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     v1.ObjectReference{Kind: "Node", Name: node},
	}
	err = b.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	switch {
	case err == nil:
		b.bound.Add(1)
		b.queue.Forget(key)
		if b.events != nil {
			b.events.Add(scheduled{namespace: pod.Namespace, name: pod.Name, uid: pod.UID, node: node})
		}
	case apierrors.IsConflict(err): // already bound (by us, on a retry whose answer was lost)
		b.conflicts.Add(1)
		b.queue.Forget(key)
	case apierrors.IsNotFound(err) || apierrors.IsGone(err):
		b.gone.Add(1)
		b.queue.Forget(key)
	default:
		if ctx.Err() != nil {
			return false
		}
		b.retries.Add(1)
		fmt.Fprintf(os.Stderr, "bind %s to %s: %v (retrying)\n", key, node, err)
		b.queue.AddRateLimited(key)
	}
	return true
}

// postEvents drains the events queue: one Scheduled Event per bound pod, best effort (an
// Event that fails is counted, not retried, as gangsched does not retry its Events).
func (b *binder) postEvents(ctx context.Context) {
	for {
		item, quit := b.events.Get()
		if quit {
			return
		}
		if _, err := b.client.CoreV1().Events(item.namespace).Create(ctx, b.event(item), metav1.CreateOptions{}); err != nil {
			b.eventsFailed.Add(1)
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "event on %s/%s: %v\n", item.namespace, item.name, err)
			}
		} else {
			b.eventsPosted.Add(1)
		}
		b.events.Done(item)
	}
}

// event is the body gangsched posts for a bound pod (operator/gangsched/binder.py event_body):
// core/v1, involvedObject the pod, Normal/Scheduled, first and last timestamp now, count 1.
func (b *binder) event(item scheduled) *v1.Event {
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	now := metav1.Now()
	return &v1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: item.name + "." + hex.EncodeToString(suffix), Namespace: item.namespace},
		InvolvedObject: v1.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: item.namespace, Name: item.name, UID: item.uid,
		},
		Type:                v1.EventTypeNormal,
		Reason:              "Scheduled",
		Message:             fmt.Sprintf("Successfully assigned %s/%s to %s", item.namespace, item.name, item.node),
		Source:              v1.EventSource{Component: "bare-binder"},
		ReportingController: "bare-binder",
		ReportingInstance:   b.instance,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
}

func stripManagedFields(obj any) (any, error) {
	if accessor, ok := obj.(metav1.ObjectMetaAccessor); ok {
		accessor.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (default $KUBECONFIG, else in-cluster)")
	flag.StringVar(&o.schedulerName, "scheduler-name", "bare-binder", "bind the pods with this spec.schedulerName")
	flag.StringVar(&o.namespace, "namespace", "", "only this namespace's pods (default: all)")
	flag.StringVar(&o.nodeSelector, "node-selector", "", "only nodes with these labels (a label selector, e.g. pool=bench)")
	flag.IntVar(&o.workers, "workers", 32, "bindings in flight (goroutines POSTing pods/binding)")
	flag.StringVar(&o.contentType, "content-type", "application/vnd.kubernetes.protobuf", "request content type")
	flag.BoolVar(&o.events, "events", false, "post one Scheduled Event per bound pod, after its Binding")
	flag.IntVar(&o.eventWorkers, "event-workers", 0, "with -events: Events in flight (default: a quarter of -workers, at least 1)")
	flag.BoolVar(&o.allPods, "all-pods", false, "list and watch every pod of the cluster, as a scheduler does (default: only its own unbound pods)")
	flag.Parse()
	if o.workers < 1 {
		fmt.Fprintln(os.Stderr, "-workers must be at least 1")
		os.Exit(2)
	}
	if o.eventWorkers < 1 {
		o.eventWorkers = max(1, o.workers/4)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bare-binder:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	nodes, err := labels.Parse(o.nodeSelector)
	if err != nil {
		return fmt.Errorf("-node-selector: %w", err)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return err
	}
	config.QPS = -1 // no client-side rate limiter at all
	config.Burst = 0
	config.ContentType = o.contentType
	config.AcceptContentTypes = o.contentType + ",application/json"
	config.UserAgent = "bare-binder"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	unbound := fields.AndSelectors(
		fields.OneTermEqualSelector("spec.schedulerName", o.schedulerName),
		fields.OneTermEqualSelector("spec.nodeName", ""),
	).String()
	podOptions := []informers.SharedInformerOption{
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.FieldSelector = unbound }),
		informers.WithNamespace(o.namespace),
	}
	if o.allPods { // every pod of every namespace; ours are picked out in the handler
		// Without managedFields, as kube-scheduler keeps its pods (and gangsched decodes only
		// the fields it reads): what a scheduler must hold, not what the apiserver sends.
		podOptions = []informers.SharedInformerOption{informers.WithTransform(stripManagedFields)}
	}
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, podOptions...)
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = nodes.String() }))
	podInformer := podFactory.Core().V1().Pods()
	nodeInformer := nodeFactory.Core().V1().Nodes()

	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "bare-binder"},
	)
	r := &ring{lister: nodeInformer.Lister()}
	r.dirty.Store(true)
	b := &binder{client: client, pods: podInformer.Lister(), queue: queue, ring: r}
	if o.events {
		b.events = workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[scheduled]{Name: "bare-binder-events"})
		b.instance, _ = os.Hostname()
	}

	ours := func(obj any) bool { // with -all-pods the informer holds every pod
		pod, ok := obj.(*v1.Pod)
		return ok && pod.Spec.SchedulerName == o.schedulerName && pod.Spec.NodeName == "" &&
			(o.namespace == "" || pod.Namespace == o.namespace)
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if !ours(obj) {
				return
			}
			if key, err := cache.ObjectToName(obj); err == nil {
				queue.Add(key)
			}
		},
	}); err != nil {
		return err
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.dirty.Store(true) },
		DeleteFunc: func(any) { r.dirty.Store(true) },
	}); err != nil {
		return err
	}

	started := time.Now()
	podFactory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced) {
		return fmt.Errorf("informers did not sync")
	}
	fmt.Fprintf(os.Stderr, "bare-binder: ready in %s: scheduler name %q, namespace %q, %d nodes (%q), %d workers, "+
		"%d pods in the informer (all pods: %t), events: %t\n",
		time.Since(started).Round(time.Millisecond), o.schedulerName, o.namespace,
		len(nodeInformer.Informer().GetStore().ListKeys()), o.nodeSelector, o.workers,
		len(podInformer.Informer().GetStore().ListKeys()), o.allPods, o.events)

	var wg, eventWg sync.WaitGroup
	for range o.workers {
		wg.Go(func() { b.work(ctx) })
	}
	if b.events != nil {
		for range o.eventWorkers {
			eventWg.Go(func() { b.postEvents(ctx) })
		}
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
	if b.events != nil {
		b.events.ShutDown()
		eventWg.Wait()
	}
	fmt.Fprintf(os.Stderr, "bare-binder: bound %d pods (%d already bound, %d gone, %d retries); events %d posted, %d failed\n",
		b.bound.Load(), b.conflicts.Load(), b.gone.Load(), b.retries.Load(), b.eventsPosted.Load(), b.eventsFailed.Load())
	return nil
}
