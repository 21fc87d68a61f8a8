package templates

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/agent/artifact"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// artifactLimits bound what an imported artifact may make: what a freeze
// may copy, and a database dump of up to 8 GiB.
var artifactLimits = artifact.Limits{Entries: Limits.Files + 8, Bytes: Limits.Bytes + 8<<30,
	Depth: Limits.Depth + 1, Record: 64 << 10, Database: 8 << 30}

// Export streams a template this node holds as its artifact to
// w. The database is dumped to a file of the node's first (a tar entry
// needs its size).
func (st *Store) Export(ctx context.Context, id string, w io.Writer) error {
	t, err := st.Get(id)
	if err != nil {
		return err
	}
	if IsStock(id) {
		return fmt.Errorf("%w: template id %q is a stock template's", sites.ErrInvalid, id)
	}
	f, err := os.CreateTemp(filepath.Dir(st.dir(id)), ".dump-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	// The database is the tenant's to grow: a dump past what an import
	// takes fails here, before it fills the node's disk.
	err = st.cfg.DB.Dump(ctx, t.DBName, &capped{w: f, left: artifactLimits.Database})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("export %s: %w", id, err)
	}
	if err := artifact.Write(w, t, f.Name(), filepath.Join(st.dir(id), "files")); err != nil {
		return fmt.Errorf("export %s: %w", id, err)
	}
	return nil
}

// Import makes template id on this node from its artifact. A
// template the node holds is returned as it is, r unread. The artifact
// is extracted beside its final place and moved there only once its
// database is loaded: a failed import leaves nothing.
func (st *Store) Import(ctx context.Context, id string, r io.Reader) (*Template, error) {
	if IsStock(id) {
		return nil, fmt.Errorf("%w: template id %q is a stock template's", sites.ErrInvalid, id)
	}
	if t, err := st.Get(id); err == nil {
		return t, nil
	} else if !errors.Is(err, sites.ErrNotFound) {
		return nil, err
	}
	return st.build(ctx, id, ".import", func(tmp string) (*Template, error) {
		var t Template
		if err := artifact.Read(r, tmp, sites.TemplateUID, artifactLimits, &t); err != nil {
			if errors.Is(err, artifact.ErrInvalid) {
				return nil, fmt.Errorf("%w: %v", sites.ErrInvalid, err)
			}
			return nil, err
		}
		if t.ID != id || t.URL == "" {
			return nil, fmt.Errorf("%w: the artifact is of template %q, not %q", sites.ErrInvalid, t.ID, id)
		}
		if err := st.cfg.DB.CreateSiteDatabase(ctx, "", templateDB(id), templateDB(id), secret.New("")); err != nil {
			return nil, err
		}
		sql, err := os.Open(filepath.Join(tmp, artifact.DatabaseName))
		if err != nil {
			return nil, err
		}
		err = st.cfg.DB.Load(ctx, templateDB(id), sql)
		sql.Close()
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", id, err)
		}
		if err := os.Remove(filepath.Join(tmp, artifact.DatabaseName)); err != nil {
			return nil, err
		}
		t.DBName = templateDB(id)
		return &t, nil
	})
}

// capped writes to w until left bytes are used, then fails.
type capped struct {
	w    io.Writer
	left int64
}

func (c *capped) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, fmt.Errorf("%w: the database dump is over %d GiB, more than a template holds", sites.ErrInvalid, artifactLimits.Database>>30)
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}
