package edge

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// registerActivations wires the activations service: the http.yaml routes (seats, usage,
// and LeasesService's leases, policies and lease keys), plus validate-license as a plain
// handler, because api.md has it answer 200 with valid for everything: a body
// grpc-gateway's decoder would turn into a 400 (malformed JSON, a key that is not a
// string, a body that is not an object) and a service that cannot answer. Valid answers
// are served from valid while it holds them (nil: no cache). The clients of its hot
// routes go in hot (validate-license's cache, the seat changes' batches, the leases'
// batches), the ones hotRoutes answers with; updates, check-update's answers, learn the
// classes that validate-license's and the leases' answers name.
func registerActivations(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn, log *slog.Logger,
	valid *licensecache.Cache[*activationsv1.ValidateLicenseResponse], updates updateAnswers, hot *hotRoutes) error {
	client := activationsv1.NewActivationsServiceClient(conn)
	hot.seats = newBatchedActivations(client)
	if err := activationsv1.RegisterActivationsServiceHandlerClient(ctx, mux, hot.seats); err != nil {
		return err
	}
	hot.leases = newBatchedLeases(activationsv1.NewLeasesServiceClient(conn), updates)
	if err := activationsv1.RegisterLeasesServiceHandlerClient(ctx, mux, hot.leases); err != nil {
		return err
	}
	hot.validate = &cachedValidate{misses: newBatchedValidate(client), valid: valid, updates: updates, log: log}
	return mux.HandlePath(http.MethodPost, ValidateLicensePath, validateLicense(mux, hot.validate))
}

// cachedValidate answers validate-license from activations' earlier valid answer for the
// same license and instance while the license cache holds it. Only valid answers are kept
// (a seat taken later needs no event); every answer about a license is dropped when the
// license changes or loses a seat (announced on license.ChangedSubject and
// license.SeatRemovedSubject, and in the answer of a write through this gateway), and none
// is kept past the license's expiry, which activations names with it
// (licensecache.ValidUntilHeader). The misses go to activations in batches
// (batchedValidate). A valid answer also names the license's check-update class, which
// check-update's answers keep (updateAnswers.learnFrom).
type cachedValidate struct {
	misses  *batchedValidate
	valid   *licensecache.Cache[*activationsv1.ValidateLicenseResponse]
	updates updateAnswers
	log     *slog.Logger // where an outage answered valid false shows; nil: nowhere
}

func (c *cachedValidate) ValidateLicense(ctx context.Context, req *activationsv1.ValidateLicenseRequest) (*activationsv1.ValidateLicenseResponse, error) {
	asked := false
	key := license.CanonicalKey(req.GetKey())
	resp, err := c.valid.GetUntil(key, req.GetInstanceId(), func() (*activationsv1.ValidateLicenseResponse, time.Time, error) {
		asked = true
		classes := c.updates.classes.StartLoad()
		resp, until, class, err := c.misses.ValidateLicense(ctx, req)
		if err != nil {
			return nil, time.Time{}, err
		}
		if !resp.GetValid() {
			return resp, licensecache.NotKept, nil
		}
		c.updates.learnFrom(classes, key, class, until)
		return resp, until, nil
	})
	metrics.RecordAnswer(ValidateLicensePath, !asked)
	return resp, err
}

func validateLicense(mux *runtime.ServeMux, client *cachedValidate) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		ctx, out, body, ok := readRawBody(mux, w, r, activationsv1.ActivationsService_ValidateLicense_FullMethodName, ValidateLicensePath)
		if ok {
			client.serve(ctx, mux, out, w, r, body)
		}
	}
}

// serve answers validate-license for body: valid false for a body that names no license
// and instance, or when activations cannot answer.
func (c *cachedValidate) serve(ctx context.Context, mux *runtime.ServeMux, out runtime.Marshaler, w http.ResponseWriter, r *http.Request, body []byte) {
	resp := &activationsv1.ValidateLicenseResponse{Valid: false}
	if req := lenientValidateRequest(body); req != nil {
		got, err := c.ValidateLicense(ctx, req)
		switch {
		case err == nil:
			resp = got
		case err == errRefusedOnMiss:
			// Refused by admission control (slot.go), which answers 503, not for an outage.
			WriteOverloaded(w)
			return
		case c.log != nil:
			// The client still gets valid false, as api.md wants; the outage shows here.
			c.log.WarnContext(ctx, "validate-license answered invalid: activations failed", "code", status.Code(err).String())
		}
	}
	runtime.ForwardResponseMessage(ctx, mux, out, w, r, resp)
}

// lenientValidateRequest reads key and instance_id from a JSON object, or returns nil
// when the body cannot name a license and an instance (then the answer is valid false).
func lenientValidateRequest(body []byte) *activationsv1.ValidateLicenseRequest {
	if req, done := plainValidateRequest(body); done {
		return req
	}
	return genericValidateRequest(body)
}

// genericValidateRequest is lenientValidateRequest through encoding/json, for any body.
func genericValidateRequest(body []byte) *activationsv1.ValidateLicenseRequest {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return nil
	}
	var key, instance string
	if json.Unmarshal(fields["key"], &key) != nil || json.Unmarshal(fields["instance_id"], &instance) != nil {
		return nil
	}
	if key == "" || instance == "" {
		return nil
	}
	return &activationsv1.ValidateLicenseRequest{Key: key, InstanceId: instance}
}
