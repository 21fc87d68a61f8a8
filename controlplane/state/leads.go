package state

import (
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Lead is a visitor the public launcher of a template captured (email
// entry mode). IPHash is a salted hash of the visitor's address, never
// the address.
type Lead struct {
	ID          string    `json:"id"`
	TemplateID  string    `json:"templateId"`
	WorkspaceID string    `json:"workspaceId"`
	Email       string    `json:"email"`
	SiteID      string    `json:"siteId"`
	IPHash      string    `json:"ipHash"`
	CreatedAt   time.Time `json:"createdAt"`
}

// LeadsOf lists a template's leads, newest first.
func (s *Store) LeadsOf(templateID string) ([]*Lead, error) {
	out, err := all[Lead](s.read(), tableLeads, "template", templateID)
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	return out, err
}

// AddLead records a lead of a template of the lead's workspace.
func (t *Tx) AddLead(l Lead) error {
	return t.run(func(tx *memdb.Txn) error {
		tpl, err := first[Template](tx, tableTemplates, "id", l.TemplateID)
		if err != nil {
			return err
		}
		if tpl == nil || tpl.WorkspaceID != l.WorkspaceID {
			return fmt.Errorf("%w: template %s", ErrNotFound, l.TemplateID)
		}
		if dup, err := first[Lead](tx, tableLeads, "id", l.ID); err != nil || dup != nil {
			return err // the same lead again: nothing to do
		}
		return insert(tx, tableLeads, &l)
	})
}
