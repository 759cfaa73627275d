package sqlite

import (
	"context"
	"fmt"

	"github.com/ratelane/ratelane/internal/store"
)

// settleBatchItems is store.Writes.SettleBatchItems: the group in one
// transaction.
func (s *Store) settleBatchItems(ctx context.Context, ps []store.SettleBatchItemParams) ([]bool, error) {
	applied := make([]bool, len(ps))
	// Each settle is guarded on the item's state: a batch lane's group of
	// settles goes in pieces (writePieces), and one repeated applies nothing.
	err := s.writePieces(ctx, len(ps), func(tx *writeTx, lo, hi int) error {
		for i := lo; i < hi; i++ {
			p := ps[i]
			var result any
			if p.Result != nil {
				result = []byte(p.Result)
			}
			res, err := s.exec(tx, `UPDATE batch_items SET state = ?, disposition = ?, reason = ?, result = ?, updated_at = ?
				WHERE batch_id = ? AND custom_id = ? AND state = ? AND (? = '' OR chunk_key = ?)`,
				p.To, p.Disposition, p.Reason, result, ns(p.Now), p.BatchID, p.CustomID, p.From, p.ChunkKey, p.ChunkKey)
			if err != nil {
				return fmt.Errorf("settle item %s: %w", p.CustomID, err)
			}
			n, _ := res.RowsAffected()
			applied[i] = n > 0
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}
