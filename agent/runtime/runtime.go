// Package runtime runs sandbox containers on containerd: image import from
// the image cache, container create/start with limits and a minimal
// privilege set, stop, removal with its snapshot, exec, and status. All
// calls are idempotent by container id, so a retried job converges.
package runtime

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd"
	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/contrib/seccomp"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/agent/logwriter"
)

// Runtime is a containerd client bound to one namespace. Every agent
// instance uses its own namespace, so two agents on one daemon (or two
// dev instances) never see each other's containers or cgroups.
type Runtime struct {
	client *containerd.Client
	ns     string
	// scope starts the containerd id of every container this Runtime
	// touches, and only those are its Containers: tests share one
	// namespace, and its unpacked images, among many Runtimes.
	scope  string
	shared bool // the client is another Runtime's: Close leaves it open
}

// Scoped is a Runtime on r's daemon and namespace that sees only the
// containers it makes, whose containerd ids start with scope (callers use
// the ids without it). Images are the namespace's, shared. Tests use it so
// that each does not import and unpack every image into a namespace of its
// own; closing it leaves r open.
func (r *Runtime) Scoped(scope string) *Runtime {
	return &Runtime{client: r.client, ns: r.ns, scope: r.scope + scope, shared: true}
}

// cid is the containerd id of the container the caller calls id.
func (r *Runtime) cid(id string) string { return r.scope + id }

// Connect dials containerd at socket and works in namespace ns.
func Connect(socket, ns string) (*Runtime, error) {
	c, err := containerd.New(socket, containerd.WithDefaultNamespace(ns), containerd.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to containerd at %s: %w", socket, err)
	}
	return &Runtime{client: c, ns: ns}, nil
}

// ConnectScoped is Connect for a namespace shared with other users of the
// daemon: the Runtime sees only the containers whose containerd ids start
// with scope (see Scoped), and closing it closes its client.
func ConnectScoped(socket, ns, scope string) (*Runtime, error) {
	r, err := Connect(socket, ns)
	if err != nil {
		return nil, err
	}
	r.scope = scope
	return r, nil
}

// Close releases the client; containers keep running.
func (r *Runtime) Close() error {
	if r.shared {
		return nil
	}
	return r.client.Close()
}

func (r *Runtime) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.ns)
}

// HasImage reports whether ref is imported and unpacked.
func (r *Runtime) HasImage(ctx context.Context, ref string) (bool, error) {
	ctx = r.ctx(ctx)
	img, err := r.client.GetImage(ctx, ref)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up image %s: %w", ref, err)
	}
	return img.IsUnpacked(ctx, containerd.DefaultSnapshotter)
}

// ImportImage imports a single-image OCI archive under the name ref
// (whatever name the archive carries) and unpacks it.
func (r *Runtime) ImportImage(ctx context.Context, ref, archive string) error {
	ctx = r.ctx(ctx)
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("open image archive: %w", err)
	}
	defer f.Close()
	// WithIndexName names the archive's index ref, whatever names the
	// archive's own annotations give.
	imgs, err := r.client.Import(ctx, f, containerd.WithAllPlatforms(false), containerd.WithIndexName(ref))
	if err != nil {
		return fmt.Errorf("import %s: %w", archive, err)
	}
	for _, i := range imgs {
		if i.Name != ref {
			continue
		}
		img := containerd.NewImage(r.client, i)
		if err := img.Unpack(ctx, containerd.DefaultSnapshotter); err != nil {
			return fmt.Errorf("unpack %s: %w", ref, err)
		}
		return nil
	}
	return fmt.Errorf("archive %s does not hold %s", archive, ref)
}

// Mount is a bind mount into the container (nosuid, nodev). Source may
// be a file.
type Mount struct {
	Source, Target string
	ReadOnly       bool
	// Slave makes mounts the host adds under Source later (and their
	// removal) appear in the container too (rslave propagation); Source
	// must then be a shared mount point.
	Slave bool
}

// Spec describes one container.
type Spec struct {
	ID    string
	Image string
	Args  []string
	Env   []string
	// Cwd is the working directory; "/" when empty.
	Cwd    string
	Mounts []Mount
	UID    uint32
	GID    uint32
	// Capabilities the process keeps; none when empty.
	Capabilities []string
	MemoryBytes  int64
	CPUMilli     int64
	Pids         int64
	// NetNS is the path of a network namespace to join; empty shares the
	// host's (with its hosts and resolv.conf), which only node services
	// such as MariaDB do.
	NetNS string
	// Confined turns on what every tenant container gets: containerd's
	// default seccomp profile and a read-only root filesystem (Mounts are
	// the only writable places).
	Confined bool
	// Runtime is a runc-compatible binary the runc shim runs instead of
	// runc: the runsc wrapper (WriteRunscWrapper) puts the container in a
	// gVisor sandbox. Empty is runc.
	Runtime string
	// LogPath receives stdout and stderr; a container nobody reads would
	// stall once its pipe filled. It must not be inside a Mount.
	LogPath string
	// LogWriter, if set, is the binary the shim runs to write LogPath
	// with a size cap (see agent/logwriter); else the shim appends to it.
	LogWriter   string
	LogMaxBytes int64
	// NoSwap keeps the container's memory out of swap (swappiness 0):
	// the node's own services, while dozing sites' memory goes there.
	NoSwap bool
	// ShimGroup, when set, has the container share one shim process with
	// the others of its group (the runc shim's grouping): one shim for
	// many sites, not one each. The group's name is scoped by the
	// runtime, as container ids are.
	ShimGroup string
}

// shimGroupAnnotation is the annotation the runc v2 shim groups by.
const shimGroupAnnotation = "io.containerd.runc.v2.group"

func (s Spec) opts() []oci.SpecOpts {
	opts := []oci.SpecOpts{
		oci.WithNoNewPrivileges,
		oci.WithUIDGID(s.UID, s.GID),
		oci.WithCapabilities(s.Capabilities),
		oci.WithProcessArgs(s.Args...),
		oci.WithEnv(s.Env),
		oci.WithProcessCwd(orDefault(s.Cwd, "/")),
	}
	if s.NetNS != "" {
		opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: s.NetNS}))
	} else {
		opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace), oci.WithHostHostsFile, oci.WithHostResolvconf)
	}
	if s.Confined {
		opts = append(opts, seccomp.WithDefaultProfile(), oci.WithRootFSReadonly())
	}
	if s.MemoryBytes > 0 {
		// Swap is the same as memory: a site cannot spill to swap.
		opts = append(opts, oci.WithMemoryLimit(uint64(s.MemoryBytes)), withMemorySwap(s.MemoryBytes))
	}
	if s.NoSwap {
		opts = append(opts, withSwappiness(0))
	}
	if s.ShimGroup != "" {
		opts = append(opts, oci.WithAnnotations(map[string]string{shimGroupAnnotation: s.ShimGroup}))
	}
	if s.CPUMilli > 0 {
		period := uint64(100000)
		opts = append(opts, oci.WithCPUCFS(s.CPUMilli*int64(period)/1000, period))
	}
	if s.Pids > 0 {
		opts = append(opts, oci.WithPidsLimit(s.Pids))
	}
	var mounts []specs.Mount
	for _, m := range s.Mounts {
		o := []string{"rbind", "rw", "nosuid", "nodev"}
		if m.ReadOnly {
			o[1] = "ro"
		}
		if m.Slave {
			o = append(o, "rslave")
		}
		mounts = append(mounts, specs.Mount{Type: "bind", Source: m.Source, Destination: m.Target, Options: o})
	}
	return append(opts, oci.WithMounts(mounts))
}

func withSwappiness(v uint64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		if s.Linux.Resources.Memory == nil {
			s.Linux.Resources.Memory = &specs.LinuxMemory{}
		}
		s.Linux.Resources.Memory.Swappiness = &v
		return nil
	}
}

func withMemorySwap(limit int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux != nil && s.Linux.Resources != nil && s.Linux.Resources.Memory != nil {
			s.Linux.Resources.Memory.Swap = &limit
		}
		return nil
	}
}

func (s Spec) logIO() cio.Creator {
	switch {
	case s.LogPath == "":
		return cio.NullIO
	case s.LogWriter != "":
		return cio.BinaryIO(s.LogWriter, logwriter.Args(s.LogPath, orDefaultInt(s.LogMaxBytes, logwriter.DefaultMaxBytes)))
	default:
		return cio.LogFile(s.LogPath)
	}
}

func orDefaultInt(v, d int64) int64 {
	if v <= 0 {
		return d
	}
	return v
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// Run makes sure the container exists and its task runs: it creates what
// is missing and starts a task that is absent or exited. A running task is
// left alone, so Run is how an agent re-attaches after a restart too.
func (r *Runtime) Run(ctx context.Context, s Spec) error {
	ctx = r.ctx(ctx)
	s.ID = r.cid(s.ID)
	if s.ShimGroup != "" {
		s.ShimGroup = r.cid(s.ShimGroup)
	}
	c, err := r.client.LoadContainer(ctx, s.ID)
	if errdefs.IsNotFound(err) {
		img, ierr := r.client.GetImage(ctx, s.Image)
		if ierr != nil {
			return fmt.Errorf("image %s: %w", s.Image, ierr)
		}
		opts := []containerd.NewContainerOpts{
			containerd.WithImage(img),
			containerd.WithNewSnapshot(s.ID+"-snapshot", img),
			containerd.WithNewSpec(append([]oci.SpecOpts{oci.WithImageConfig(img)}, s.opts()...)...),
		}
		if s.Runtime != "" {
			if s.NetNS == "" {
				return fmt.Errorf("container %s: a gVisor container needs a network namespace of its own", s.ID)
			}
			opts = append(opts, containerd.WithRuntime(runcShim, &runcoptions.Options{BinaryName: s.Runtime}))
		}
		c, err = r.client.NewContainer(ctx, s.ID, opts...)
	}
	if err != nil {
		return fmt.Errorf("container %s: %w", s.ID, err)
	}
	task, err := c.Task(ctx, nil)
	switch {
	case err == nil:
		st, serr := task.Status(ctx)
		if serr != nil {
			return fmt.Errorf("task %s status: %w", s.ID, serr)
		}
		if st.Status == containerd.Running || st.Status == containerd.Paused {
			return nil
		}
		if _, derr := task.Delete(ctx, containerd.WithProcessKill); derr != nil && !errdefs.IsNotFound(derr) {
			return fmt.Errorf("delete stopped task %s: %w", s.ID, derr)
		}
	case !errdefs.IsNotFound(err):
		return fmt.Errorf("task %s: %w", s.ID, err)
	}
	task, err = c.NewTask(ctx, s.logIO())
	if err != nil {
		return fmt.Errorf("create task %s: %w", s.ID, err)
	}
	if err := task.Start(ctx); err != nil {
		if _, derr := task.Delete(ctx, containerd.WithProcessKill); derr != nil && s.Runtime != "" {
			// runsc cannot signal a sandbox stuck in "created": its own
			// forced delete ends it, then the task goes.
			_ = exec.CommandContext(ctx, s.Runtime, "--root", filepath.Join(runcRoot, r.ns), "delete", "--force", s.ID).Run()
			_, _ = task.Delete(ctx)
		}
		return fmt.Errorf("start task %s: %w", s.ID, err)
	}
	return nil
}

// Running reports whether the container's task runs; a missing container
// is not running.
func (r *Runtime) Running(ctx context.Context, id string) (bool, error) {
	ctx = r.ctx(ctx)
	task, err := r.task(ctx, id)
	if task == nil || err != nil {
		return false, err
	}
	st, err := task.Status(ctx)
	if err != nil {
		return false, err
	}
	return st.Status == containerd.Running, nil
}

// task is the task of the container the caller calls id; nil, with no
// error, when there is no such container or it has no task. ctx is
// already the namespace's.
func (r *Runtime) task(ctx context.Context, id string) (containerd.Task, error) {
	c, err := r.client.LoadContainer(ctx, r.cid(id))
	if errdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil, nil
	}
	return task, err
}

// Stop ends the container's task (SIGTERM, then SIGKILL after grace) and
// deletes it; the container and its snapshot stay for a later Run.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	ctx = r.ctx(ctx)
	task, err := r.task(ctx, id)
	if task == nil || err != nil {
		return err
	}
	exited, err := task.Wait(ctx)
	if err != nil {
		return fmt.Errorf("wait task %s: %w", id, err)
	}
	// A frozen (dozing) task would take the signal only once thawed.
	if frozen, _ := r.Frozen(id); frozen {
		_ = r.Thaw(ctx, id)
	}
	if err := task.Kill(ctx, syscall.SIGTERM); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("signal %s: %w", id, err)
	}
	select {
	case <-exited:
	case <-time.After(grace):
		_ = task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll)
		<-exited
	}
	if _, err := task.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete task %s: %w", id, err)
	}
	return nil
}

// Remove stops the container and deletes it with its snapshot. A missing
// container is fine.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	if err := r.Stop(ctx, id, 5*time.Second); err != nil {
		return err
	}
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, r.cid(id))
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	return nil
}

// Exists reports whether a container with this id exists.
func (r *Runtime) Exists(ctx context.Context, id string) (bool, error) {
	_, err := r.client.LoadContainer(r.ctx(ctx), r.cid(id))
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// ExecResult is what a command inside a container produced.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// Truncated is set when the command wrote more than MaxExecOutput to
	// stdout (or MaxExecStderr to stderr); the excess was read and dropped.
	Truncated bool
}

// MaxExecOutput bounds what one exec's stdout may hand back (the file
// manager's largest answer, a 32 MiB file in base64, fits); MaxExecStderr
// bounds its stderr. The process is never blocked: the excess is drained.
const (
	MaxExecOutput = 64 << 20
	MaxExecStderr = 1 << 20
)

// capped keeps the first max bytes written to it and counts the rest.
type capped struct {
	buf     bytes.Buffer
	max     int
	dropped bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room < len(p) {
		c.dropped = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.buf.Write(p)
}

// Exec runs argv in the running container as uid:gid and waits for it.
func (r *Runtime) Exec(ctx context.Context, id string, argv []string, env []string, uid, gid uint32, stdin []byte) (*ExecResult, error) {
	return r.ExecReader(ctx, id, argv, env, uid, gid, bytes.NewReader(stdin))
}

// ExecReader is Exec with stdin streamed from a reader (an archive
// unpacked inside the container): the process reads it to EOF.
func (r *Runtime) ExecReader(ctx context.Context, id string, argv []string, env []string, uid, gid uint32, stdin io.Reader) (*ExecResult, error) {
	return r.exec(ctx, id, argv, env, uid, gid, stdin, MaxExecOutput, MaxExecStderr)
}

// ExecBounded is Exec keeping at most maxOut bytes of stdout and maxErr
// of stderr (the rest is drained and dropped): for output a tenant's
// code chooses.
func (r *Runtime) ExecBounded(ctx context.Context, id string, argv []string, env []string, uid, gid uint32, stdin []byte, maxOut, maxErr int) (*ExecResult, error) {
	return r.exec(ctx, id, argv, env, uid, gid, bytes.NewReader(stdin), min(maxOut, MaxExecOutput), min(maxErr, MaxExecStderr))
}

func (r *Runtime) exec(ctx context.Context, id string, argv []string, env []string, uid, gid uint32, stdin io.Reader, maxOut, maxErr int) (*ExecResult, error) {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, r.cid(id))
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", id, err)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return nil, err
	}
	p := *spec.Process
	p.Args = argv
	p.Env = append(append([]string{}, spec.Process.Env...), env...)
	p.User = specs.User{UID: uid, GID: gid}
	p.Terminal = false
	stdout, stderr := &capped{max: maxOut}, &capped{max: maxErr}
	in := &eofReader{r: stdin, eof: make(chan struct{})}
	execID := fmt.Sprintf("exec-%d", time.Now().UnixNano())
	proc, err := task.Exec(ctx, execID, &p, cio.NewCreator(cio.WithStreams(in, stdout, stderr)))
	if err != nil {
		return nil, fmt.Errorf("exec in %s: %w", id, err)
	}
	defer proc.Delete(context.WithoutCancel(ctx), containerd.WithProcessKill)
	exited, err := proc.Wait(ctx)
	if err != nil {
		return nil, err
	}
	if err := proc.Start(ctx); err != nil {
		return nil, fmt.Errorf("start exec in %s: %w", id, err)
	}
	// Once all of stdin is handed over, close the process's stdin so a
	// command that reads to EOF can finish.
	go func() {
		select {
		case <-in.eof:
			_ = proc.CloseIO(context.WithoutCancel(ctx), containerd.WithStdinCloser)
		case <-ctx.Done():
		}
	}()
	select {
	case st := <-exited:
		code, _, err := st.Result()
		if err != nil {
			return nil, err
		}
		// Let the IO copy finish before reading the buffers; a child the
		// command left in the background may hold its output open for
		// ever, so the copy gets a bound, then is cut.
		if pio := proc.IO(); pio != nil {
			copied := make(chan struct{})
			go func() { pio.Wait(); close(copied) }()
			select {
			case <-copied:
			case <-time.After(execDrain):
				pio.Cancel()
				pio.Close()
				<-copied
			}
		}
		return &ExecResult{ExitCode: int(code), Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes(),
			Truncated: stdout.dropped || stderr.dropped}, nil
	case <-ctx.Done():
		_ = proc.Kill(context.WithoutCancel(ctx), syscall.SIGKILL)
		return nil, fmt.Errorf("exec in %s: %w", id, ctx.Err())
	}
}

// execDrain bounds the wait for an exec's output once it has exited.
const execDrain = 2 * time.Second

// eofReader tells, by closing eof, that its reader has been drained.
type eofReader struct {
	r    io.Reader
	eof  chan struct{}
	once bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !e.once {
		e.once = true
		close(e.eof)
	}
	return n, err
}

// Containers lists the ids of this namespace's containers (of its scope).
func (r *Runtime) Containers(ctx context.Context) ([]string, error) {
	cs, err := r.client.Containers(r.ctx(ctx))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		if id, ok := strings.CutPrefix(c.ID(), r.scope); ok {
			out = append(out, id)
		}
	}
	return out, nil
}
