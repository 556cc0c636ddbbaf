package bench

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

func init() {
	Register(Scenario{
		ID:   "issue",
		Name: "issue-license (gateway → licensing → Postgres, event in the outbox)",
		Note: "the admin issues a license per op; with the spine each issue also writes its license.issued event in the same " +
			"transaction, which the outbox relay publishes and the events service stores (their CPU is in the table: licensing, " +
			"bench (NATS), other (events)); the figure for \"before the spine\" is this scenario on binaries built with " +
			"-tags keyhouse_bench_no_outbox (docs/PERFORMANCE.md), compared by CPU per op",
		Setup: setupIssue,
	})
}

func setupIssue(_ context.Context, env *Env) (Op, error) {
	product := fmt.Sprintf("bench-issue-%d", time.Now().UnixNano())
	return func(ctx context.Context, worker, i int) error {
		st, data, err := env.Do(ctx, http.MethodPost, "/v1/issue-license", ClientIP(170+worker, i, 50), true, map[string]any{
			"tier": "pro", "product_id": product, "issued_to": fmt.Sprintf("issue-%d-%d@example.com", worker, i),
		})
		return Expect(st, data, err, http.StatusOK)
	}, nil
}
