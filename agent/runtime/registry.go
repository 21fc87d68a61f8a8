package runtime

import (
	"context"
	"fmt"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/remotes"
	"github.com/containerd/containerd/remotes/docker"
)

// resolver reaches registries over HTTPS, and over plain HTTP only on
// localhost (a registry an operator runs next to the node).
func resolver() remotes.Resolver {
	return docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchLocalhost)),
	})
}

// PullImage fetches ref from its registry and unpacks it.
func (r *Runtime) PullImage(ctx context.Context, ref string) error {
	if _, err := r.client.Pull(r.ctx(ctx), ref, containerd.WithPullUnpack, containerd.WithResolver(resolver()),
		containerd.WithPullSnapshotter(containerd.DefaultSnapshotter)); err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	return nil
}

// PushImage pushes the local image src to the registry reference dst.
func (r *Runtime) PushImage(ctx context.Context, src, dst string) error {
	ctx = r.ctx(ctx)
	img, err := r.client.GetImage(ctx, src)
	if err != nil {
		return fmt.Errorf("image %s: %w", src, err)
	}
	is := r.client.ImageService()
	if _, err := is.Create(ctx, images.Image{Name: dst, Target: img.Target()}); err != nil {
		if _, uerr := is.Update(ctx, images.Image{Name: dst, Target: img.Target()}); uerr != nil {
			return fmt.Errorf("tag %s: %w", dst, err)
		}
	}
	if err := r.client.Push(ctx, dst, img.Target(), containerd.WithResolver(resolver())); err != nil {
		return fmt.Errorf("push %s: %w", dst, err)
	}
	return nil
}
