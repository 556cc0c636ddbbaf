/** Every failure: an answer of the server (status, its "error" text) or a condition found
 * on this side (status 0). `code` is the machine-readable name to switch on. */
export declare class KeyhouseError extends Error {
    readonly code: string;
    readonly status: number;
    /** Seconds the server asked to wait (429, 503), or the client holds back (backing_off). */
    readonly retryAfter: number;
    constructor(code: string, message: string, status?: number, 
    /** Seconds the server asked to wait (429, 503), or the client holds back (backing_off). */
    retryAfter?: number);
}
/** The code of an answer of the server. */
export declare function errorCode(status: number, message: string): string;
/** The value sent for one machine component: hex HMAC-SHA256 keyed with the product id
 * over the trimmed raw value (no cross-vendor identifier leaves the machine). */
export declare function hashComponent(productId: string, raw: string): string;
/** Whether this process runs in a container (Docker, Podman, Kubernetes, containerd). */
export declare function inContainer(): boolean;
/** This machine's components, each hashed with productId: Linux machine_id, dmi_uuid,
 * root_disk; macOS platform_uuid; Windows machine_guid. In a container (detected, or
 * `container: true`) the image's machine id is not this machine's: the components are
 * the install id kept at installIdPath (on a volume) plus the host identity it can read. */
export declare function machineComponents(productId: string, opts?: {
    container?: boolean;
    installIdPath?: string;
}): Record<string, string>;
/** A stable instance id for a machine with these (hashed) components: "m-" and 32 hex
 * digits of SHA-256 over the first of machine_id, platform_uuid, machine_guid, install_id,
 * dmi_uuid, root_disk, hostname it has (else its first component by name). Hashed again,
 * so no raw identifier is sent; '' with no component (client.instanceId() then uses the
 * host name). */
export declare function instanceId(components: Record<string, string>): string;
/** Writes a file atomically: a temporary file in the same folder, synced, renamed over it. */
export declare function writeFileAtomic(file: string, data: string): void;
export interface OfflineLicense {
    key: string;
    tier: string;
    product_id: string;
    expires_at: string | null;
    limits: Record<string, number>;
}
/** Checks an offline export (GET /v1/export-license/{key}/offline) with the server's RSA
 * public key (or any of several: the keys GET /v1/public-keys lists) and no network, then
 * its expiry. Throws KeyhouseError invalid_signature or expired. */
export declare function verifyOfflineExport(exportJson: string, publicKeyPem: string | string[], nowMs?: number): OfflineLicense;
export interface Release {
    product_id: string;
    version: string;
    channel: string;
    platform: string;
    artifact_url: string;
    checksum: string;
    release_notes: string;
    signature: string;
    issued_at: string;
}
export interface UpdateRequest {
    product_id: string;
    channel: string;
    platform: string;
}
/** How far a manifest's issued_at may be ahead of the local clock (seconds). */
export declare const MANIFEST_SKEW_SECONDS = 300;
/** Checks a release manifest before it is believed: the signature (by the key, or any of
 * several keys given) over its fields in the signed order, that it answers the request, and that it was issued at most maxAgeSeconds
 * ago (a signed manifest stays valid after unpublish; the age stops replays). Throws
 * KeyhouseError invalid_signature, manifest_mismatch or manifest_too_old. */
export declare function verifyManifest(release: Release, request: UpdateRequest, publicKeyPem: string | string[], nowMs?: number, maxAgeSeconds?: number): void;
export interface JWK {
    kty: string;
    crv: string;
    x: string;
    kid: string;
    use?: string;
    alg?: string;
    status?: string;
}
export interface JWKS {
    keys: JWK[];
}
export interface LeaseClaims {
    iss: string;
    sub: string;
    aud: string;
    jti: string;
    iat: number;
    exp: number;
    renew_after: number;
    tier: string;
    status: string;
    license_expires_at: number | null;
    limits: Record<string, number>;
    entitlements: string[];
    instance_id: string;
    floating: boolean;
    components?: Record<string, string>;
    /** Hosted: the tenant whose keys sign the lease. */
    tenant_id?: string;
    nonce?: string;
}
/** How far (seconds) a lease's iat may be ahead of the clock, and the clock may fall back
 * below the newest iat seen, before the verdict is clock_tampered. */
export declare const CLOCK_TOLERANCE_SECONDS = 300;
/** Starts the nonce the SDKs send with every lease request: the local clock at the
 * request, in Unix seconds. The server signs it into the lease, so the lease itself says
 * how far this machine's clock was from the server's when it was asked for
 * (leaseClockOffset), and an edited store cannot change that. */
export declare const CLOCK_NONCE_PREFIX = "local-time:";
/** How far (seconds) the server's clock was ahead of this machine's when the lease was
 * asked for: its iat less the local time the SDK's nonce carries (negative when the local
 * clock is ahead; 0 for a lease without that nonce). The lease's times are the server's:
 * its renew_after and exp are judged on the local clock plus this offset, so a machine
 * whose clock is wrong is neither renewing all the time nor unlicensed online. */
export declare function leaseClockOffset(claims: LeaseClaims): number;
export interface LeaseCheck {
    productId: string;
    licenseKey?: string;
    nowSeconds: number;
    newestIatSeen?: number;
    components: Record<string, string>;
}
/** Thrown by verifyLease; `claims` are set when the signature verified. */
export declare class LeaseError extends KeyhouseError {
    readonly unknownKid: boolean;
    /** The lease's claims, when its signature verified. Not enumerable: claims.sub is the
     * license key, which console.error(err), util.inspect(err) and JSON.stringify(err) would
     * otherwise print; code reads err.claims as any property. */
    readonly claims?: LeaseClaims;
    constructor(code: string, message: string, claims?: LeaseClaims, unknownKid?: boolean);
}
/** Checks a lease (a JWS signed with Ed25519) and returns its claims, or throws LeaseError
 * whose code is the verdict: invalid_lease, wrong_product, wrong_license, clock_tampered,
 * expired, machine_mismatch.
 *
 * exp is judged on the lease's clock: nowSeconds plus leaseClockOffset. The offset only
 * corrects a clock that was already wrong when the lease was asked for: it cannot lengthen
 * a lease, because a clock moved back after the request moves the lease's clock back as
 * well, and more than CLOCK_TOLERANCE_SECONDS below the request is clock_tampered like a
 * clock behind the server's (iat, or the newest iat seen, more than the tolerance ahead of
 * the local clock). */
export declare function verifyLease(token: string, keys: JWKS, c: LeaseCheck): LeaseClaims;
/** Keeps the client's state (activation token, newest lease) between runs. */
export interface Store {
    load(): string | null;
    save(data: string): void;
}
/** Stores the state in one file, replaced atomically, mode 0600. */
export declare class FileStore implements Store {
    readonly file: string;
    constructor(file: string);
    load(): string | null;
    save(data: string): void;
}
/** The answer of check(). */
export interface Verdict {
    licensed: boolean;
    /** "licensed", or why not: not_activated, license_not_found, license_not_active
     * (revoked), license_expired, seat_lapsed, machine_mismatch, expired (the lease ran out
     * and the server could not be reached), unreachable (no lease yet and no server),
     * invalid_lease, lease_keys_unavailable (the lease's key is not pinned and GET
     * /v1/lease-keys could not be fetched), wrong_product, wrong_license, clock_tampered,
     * components_required, tenant_suspended (a hosted server answered 403 Tenant is
     * suspended, and the lease ran out or there is none; the lease is kept and answers
     * licensed until its exp). */
    reason: string;
    /** Answered from the stored lease without reaching the server. */
    offline?: boolean;
    tier?: string;
    entitlements?: string[];
    limits?: Record<string, number>;
    floating?: boolean;
    leaseExpiresAt?: Date;
    renewAfter?: Date;
    licenseExpiresAt?: Date | null;
}
export interface ClientOptions {
    /** The server's base URL. */
    url: string;
    productId: string;
    key: string;
    /** The server's RSA public key PEM (GET /v1/public-key), pinned in the app. */
    publicKeyPem?: string;
    /** More RSA public keys pinned in the app, each accepted as well: ship every key GET
     * /v1/public-keys lists (the current and, during a planned rotation, the next one), so
     * that the app keeps verifying manifests and offline exports after the server promotes
     * the next key. */
    publicKeyPems?: string[];
    /** Lease keys pinned in the app (GET /v1/lease-keys); an unknown kid makes the client
     * fetch the set once more unless noKeyRefresh. */
    leaseKeys?: JWKS;
    noKeyRefresh?: boolean;
    /** Pins the hosted tenant whose lease keys are fetched. Optional: without it the client
     * fetches the key set of the tenant its first lease names (the tenant_id claim) and keeps
     * to that tenant once a lease verified against it. */
    tenantId?: string;
    /** File of the state; default <home>/.config/keyhouse/<product id>.json. */
    storePath?: string;
    store?: Store;
    components?: Record<string, string>;
    /** Per-request deadline, ms (default 10000). */
    requestTimeoutMs?: number;
    /** Receives one line per failed request or verdict change; never a key, token or lease. */
    logger?: (line: string) => void;
    /** The clock, ms since the epoch (tests move it). */
    now?: () => number;
    /** Called once per lapse of a floating seat (its lease could not be renewed before it
     * ran out, or the server says it lapsed), with the verdict check() answers: seat_lapsed. */
    onLapsed?: (v: Verdict) => void;
    /** Random number in [0, 1) for the backoff draw. */
    random?: () => number;
}
/** Failure backoff: after the n-th failure in a row (no answer, 429, 5xx) nothing is sent
 * for max(Retry-After, 60 s, a draw in [0, min(30 min, 60 s·2^(n-1))]). A 403 Tenant is
 * suspended (a hosted server whose operator suspended the vendor's account) is paced
 * apart, at the refusals' pace: nothing for max(Retry-After, 60 s) after it, one probe at a
 * time, with no growth, so an app whose lease ran out meanwhile is licensed within a
 * minute of the suspension being lifted. */
export declare const MIN_FAILING_INTERVAL_MS = 60000;
export declare const MAX_BACKOFF_MS: number;
/** How many times trackUsage sends one increment again after no answer or a 5xx, with the
 * same Idempotency-Key, waiting USAGE_RETRY_DELAY_MS·2^i (with jitter) before the i-th. */
export declare const USAGE_RETRIES = 2;
export declare const USAGE_RETRY_DELAY_MS = 250;
/** One license on this machine, against one server. */
export declare class Client {
    private readonly opts;
    private readonly store;
    private readonly components;
    private readonly now;
    private keys;
    private state;
    private failures;
    /** The last answer was a suspension: one probe at a time. */
    private paced;
    private nextAttemptMs;
    private renewal;
    private heartbeatTimer;
    /** The floating lease whose lapse onLapsed was told of. */
    private lapseReported;
    private closed;
    constructor(options: ClientOptions);
    private log;
    private save;
    private mergeKeys;
    /** The server works and refuses the vendor's account: the refusals' pace, a minute (or
     * the server's Retry-After), with no growth; a run of failures ends here. The time is
     * kept in the store (see State.suspended_at). */
    private recordSuspension;
    /** An answer of the server other than a suspension: the backoff and the suspension end. */
    private recordAnswer;
    private recordFailure;
    /** Sends one JSON request; resolves the 200 body. gated false skips the failure
     * backoff's admission, for the bounded retries of one track-usage increment (their
     * failures are still recorded). */
    private request;
    /** POST /v1/verify-license; an invalid license throws (license_not_found, license_expired, license_not_active). */
    verify(): Promise<{
        valid: boolean;
        tier: string;
        product_id: string;
        limits: Record<string, number>;
        expires_at: string | null;
        issued_at: string;
        status: string;
    }>;
    /** POST /v1/validate-license for this machine's seat. */
    validate(): Promise<boolean>;
    /** This machine's instance id for activate(): instanceId() of the client's components,
     * or, with none, of the host name hashed with the product id. Stable across runs and
     * reinstalls, different on another machine, and never a raw identifier. */
    instanceId(): string;
    /** Takes a seat for instanceId (POST /v1/activate-license; client.instanceId() gives this
     * machine's) and stores its token. When the seat exists but the store holds no token for
     * it (a reinstall), a seat bound to this machine is proven by its components and gets a
     * new token (POST /v1/leases with instance_id, docs/leases.md "Reinstall"); an unbound
     * one throws invalid_activation_token: release it (the customer portal) and activate again.
     * Before taking a seat it asks verify-license for the license's product: a license of
     * another product throws wrong_product and takes no seat. */
    activate(instanceId: string): Promise<{
        alreadyActivated: boolean;
        instanceId: string;
    }>;
    /** A new token for an existing seat bound to this machine. The lease that comes with it
     * is stored unverified: check() verifies a stored lease before believing it. */
    private reinstall;
    /** Frees this machine's seat and forgets its token and lease; resolves whether one was freed. */
    deactivate(): Promise<boolean>;
    /** Adds n to a metric of this seat; resolves the new running total. Each call is one
     * logical increment with one Idempotency-Key (a fresh one, or opts.idempotencyKey, for an
     * app that retries an increment later): no answer or a 5xx is retried USAGE_RETRIES times
     * with that key, so an increment whose answer was lost counts once. */
    trackUsage(metric: string, n?: number, opts?: {
        idempotencyKey?: string;
    }): Promise<number>;
    /** POST /v1/usage-report. */
    usageReport(): Promise<{
        valid: boolean;
        status: string;
        expires_at: string | null;
        metrics: Array<{
            metric: string;
            used: number;
            limit: number;
            remaining: number;
            exceeded: boolean;
        }>;
    }>;
    /** Asks for a release newer than currentVersion; resolves null when there is none, and a
     * release only after verifyManifest accepted it. */
    checkUpdate(currentVersion: string, channel?: string, platform?: string): Promise<Release | null>;
    /** Checks an offline export with the pinned public keys at the client's clock. */
    verifyOfflineExport(exportJson: string): OfflineLicense;
    /** publicKeyPem and publicKeyPems, the RSA keys the app accepts. */
    private pinnedPublicKeys;
    private checkLease;
    /** The lease's exp and renew_after are given on this machine's clock (the server's times
     * less the lease's clock offset), so an app that schedules its own checks by them keeps
     * to the server's timing whatever the clock. */
    private static verdictOf;
    /** Whether the app is licensed, offline first: a valid stored lease answers at once
     * (past its renew_after it is renewed in the background: see `renewal`); without one,
     * or with one that ran out, the server is asked for a lease. While the server cannot be
     * reached a stored lease is good until its exp; a refusal of the server (revoked,
     * expired, seat lapsed) stands from the first renewal that reaches it, and out of reach;
     * a refused license is asked about again at most once per MIN_FAILING_INTERVAL_MS (the
     * checks in between answer the refusal with no request), so one reinstated or extended is
     * licensed at the first check online a minute after the last ask. A hosted server that
     * answers 403 Tenant is suspended (its operator suspended the vendor's account) is a
     * server that cannot be reached for the license: the lease is kept and good until its
     * exp, then tenant_suspended, and the server is asked at most once a minute. */
    check(): Promise<Verdict>;
    /** The background renewal check() started, if one runs. */
    get pendingRenewal(): Promise<Verdict> | null;
    /** Asks the server for a new lease now (POST /v1/leases); resolves the verdict. */
    renew(): Promise<Verdict>;
    /** The verdict from the stored lease while the server cannot be reached, or answers that
     * the vendor's account is suspended. */
    private offlineVerdict;
    /** Calls onLapsed once per lapse: the lapse of one lease is reported by the first check
     * that finds it, offline or from the server, and not by the checks after it. */
    private reportLapse;
    /** Keeps a floating seat leased: renews at each lease's renew_after until close(),
     * reporting a lapsed seat through onLapsed. The timer does not keep Node running. */
    startHeartbeat(): void;
    /** The heartbeat's timer, which does not keep Node running (the live tests move their
     * clock instead). */
    private heartbeatAfter;
    /** Stops the heartbeat and, for a floating seat, releases it at once. */
    close(): Promise<void>;
}
