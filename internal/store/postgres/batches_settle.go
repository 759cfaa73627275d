package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/store"
)

// settleBatchItems is store.Writes.SettleBatchItems: the group in one
// transaction and one round trip.
func (s *Store) settleBatchItems(ctx context.Context, ps []store.SettleBatchItemParams) ([]bool, error) {
	applied := make([]bool, len(ps))
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, p := range ps {
			var result []byte
			if p.Result != nil {
				result = p.Result
			}
			b.Queue(`UPDATE batch_items SET state = $1, disposition = $2, reason = $3, result = $4, updated_at = $5
				WHERE batch_id = $6 AND custom_id = $7 AND state = $8 AND ($9 = '' OR chunk_key = $9)`,
				p.To, p.Disposition, p.Reason, result, ns(p.Now), p.BatchID, p.CustomID, p.From, p.ChunkKey)
		}
		br := tx.SendBatch(ctx, &b)
		for i := range ps {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return err
			}
			applied[i] = tag.RowsAffected() > 0
		}
		return br.Close()
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}
