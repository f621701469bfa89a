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
// No client-side rate limit (QPS -1: client-go builds no token bucket), like gangsched,
// whose only limit is its number of writes in flight (--concurrency). Requests use protobuf,
// as kube-scheduler's do. See README.md.
package main

import (
	"context"
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

	bound, conflicts, gone, retries atomic.Int64
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

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (default $KUBECONFIG, else in-cluster)")
	flag.StringVar(&o.schedulerName, "scheduler-name", "bare-binder", "bind the pods with this spec.schedulerName")
	flag.StringVar(&o.namespace, "namespace", "", "only this namespace's pods (default: all)")
	flag.StringVar(&o.nodeSelector, "node-selector", "", "only nodes with these labels (a label selector, e.g. pool=bench)")
	flag.IntVar(&o.workers, "workers", 32, "bindings in flight (goroutines POSTing pods/binding)")
	flag.StringVar(&o.contentType, "content-type", "application/vnd.kubernetes.protobuf", "request content type")
	flag.Parse()
	if o.workers < 1 {
		fmt.Fprintln(os.Stderr, "-workers must be at least 1")
		os.Exit(2)
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
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(o.namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.FieldSelector = unbound }))
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

	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
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
	fmt.Fprintf(os.Stderr, "bare-binder: ready in %s: scheduler name %q, namespace %q, %d nodes (%q), %d workers\n",
		time.Since(started).Round(time.Millisecond), o.schedulerName, o.namespace,
		len(nodeInformer.Informer().GetStore().ListKeys()), o.nodeSelector, o.workers)

	var wg sync.WaitGroup
	for range o.workers {
		wg.Go(func() { b.work(ctx) })
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
	fmt.Fprintf(os.Stderr, "bare-binder: bound %d pods (%d already bound, %d gone, %d retries)\n",
		b.bound.Load(), b.conflicts.Load(), b.gone.Load(), b.retries.Load())
	return nil
}
