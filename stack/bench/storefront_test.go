package bench

import (
	"context"
	"testing"
	"time"

	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/protobuf/proto"
)

func licenseIssued(t *testing.T, product, issuedTo string) []byte {
	t.Helper()
	data, err := proto.Marshal(&eventsv1.Event{Type: "license.issued", Data: &eventsv1.Event_LicenseIssued{
		LicenseIssued: &eventsv1.LicenseIssued{Key: "K", ProductId: product, IssuedTo: issuedTo},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A session's license counts once its license.issued of the row's product is on the
// stream, even when the event comes before the session starts waiting (the callback's
// 200 can come after the worker issued it); another product's license for the same
// customer, or something that is not an event, releases nobody.
func TestASessionWaitsForItsLicenseOfTheRowsProduct(t *testing.T) {
	arr := newArrivals()
	deliver := func(data []byte) {
		if customer, ok := issuedToOfProduct(data, "shop"); ok {
			arr.arrived(customer)
		}
	}
	deliver(licenseIssued(t, "shop", "cus_early"))
	if err := arr.await(context.Background(), "cus_early"); err != nil {
		t.Fatalf("a license issued before the wait: %v", err)
	}
	deliver(licenseIssued(t, "other", "cus_late"))
	deliver([]byte("not an event"))
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := arr.await(short, "cus_late"); err == nil {
		t.Fatal("another product's license released the session")
	}
	own := licenseIssued(t, "shop", "cus_late")
	go deliver(own)
	if err := arr.await(context.Background(), "cus_late"); err != nil {
		t.Fatalf("its own license: %v", err)
	}
}
