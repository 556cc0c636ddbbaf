"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.Client = exports.USAGE_RETRY_DELAY_MS = exports.USAGE_RETRIES = exports.MAX_BACKOFF_MS = exports.MIN_FAILING_INTERVAL_MS = exports.FileStore = exports.LeaseError = exports.CLOCK_NONCE_PREFIX = exports.CLOCK_TOLERANCE_SECONDS = exports.MANIFEST_SKEW_SECONDS = exports.KeyhouseError = void 0;
exports.errorCode = errorCode;
exports.hashComponent = hashComponent;
exports.inContainer = inContainer;
exports.machineComponents = machineComponents;
exports.instanceId = instanceId;
exports.writeFileAtomic = writeFileAtomic;
exports.verifyOfflineExport = verifyOfflineExport;
exports.verifyManifest = verifyManifest;
exports.leaseClockOffset = leaseClockOffset;
exports.verifyLease = verifyLease;
// Client of a Keyhouse license server for Node 18+ and Electron's main process, with no
// dependency beyond Node's built-ins.
const crypto = require("crypto");
const fs = require("fs");
const os = require("os");
const path = require("path");
const child_process_1 = require("child_process");
/** Every failure: an answer of the server (status, its "error" text) or a condition found
 * on this side (status 0). `code` is the machine-readable name to switch on. */
class KeyhouseError extends Error {
    constructor(code, message, status = 0, 
    /** Seconds the server asked to wait (429, 503), or the client holds back (backing_off). */
    retryAfter = 0) {
        super(message);
        this.code = code;
        this.status = status;
        this.retryAfter = retryAfter;
        this.name = 'KeyhouseError';
    }
}
exports.KeyhouseError = KeyhouseError;
// The server's error texts with a code of their own; a text ending in ": " is a prefix.
const ERROR_TABLE = [
    [404, 'License key not found', 'license_not_found'],
    [403, 'License has expired', 'license_expired'],
    [403, 'License is expired', 'license_expired'],
    [403, 'License is not active', 'license_not_active'],
    [403, 'Activation limit exceeded for this license key', 'activation_limit_exceeded'],
    [403, 'Invalid activation token', 'invalid_activation_token'],
    [403, 'Metric not allowed: ', 'metric_not_allowed'],
    [403, 'Usage limit exceeded for metric: ', 'usage_limit_exceeded'],
    [403, 'Seat lease has expired', 'seat_lease_expired'],
    [403, 'Machine fingerprint does not match', 'fingerprint_mismatch'],
    [400, "components are required by this product's policy", 'components_required'],
    [404, 'Release not found', 'release_not_found'],
    [403, 'Tenant is suspended', 'tenant_suspended'],
];
/** The code of an answer of the server. */
function errorCode(status, message) {
    for (const [s, m, c] of ERROR_TABLE) {
        if (s === status && (message === m || (m.endsWith(': ') && message.startsWith(m))))
            return c;
    }
    if (status === 400 || status === 413)
        return 'invalid_request';
    if (status === 404)
        return 'not_found';
    if (status === 429)
        return 'rate_limited';
    if (status === 503)
        return 'unavailable';
    if (status >= 500)
        return 'server_error';
    return `http_${status}`;
}
/** The value sent for one machine component: hex HMAC-SHA256 keyed with the product id
 * over the trimmed raw value (no cross-vendor identifier leaves the machine). */
function hashComponent(productId, raw) {
    return crypto.createHmac('sha256', productId).update(raw.trim()).digest('hex');
}
function readTrim(file) {
    try {
        return fs.readFileSync(file, 'utf8').trim();
    }
    catch {
        return '';
    }
}
/** Whether this process runs in a container (Docker, Podman, Kubernetes, containerd). */
function inContainer() {
    if (fs.existsSync('/.dockerenv') || fs.existsSync('/run/.containerenv'))
        return true;
    if (process.env.KUBERNETES_SERVICE_HOST)
        return true;
    return /docker|kubepods|containerd|libpod/.test(readTrim('/proc/1/cgroup'));
}
function rootDiskId() {
    let source = '';
    for (const line of readTrim('/proc/self/mountinfo').split('\n')) {
        const f = line.split(' ');
        const dash = f.indexOf('-');
        if (f[4] === '/' && dash > 0 && f[dash + 2])
            source = f[dash + 2];
    }
    if (!source)
        return '';
    try {
        for (const name of fs.readdirSync('/dev/disk/by-uuid')) {
            if (fs.realpathSync(path.join('/dev/disk/by-uuid', name)) === source)
                return name;
        }
    }
    catch {
        /* no by-uuid folder */
    }
    return '';
}
function installId(file) {
    const id = readTrim(file);
    if (id)
        return id;
    const fresh = crypto.randomBytes(16).toString('hex');
    try {
        writeFileAtomic(file, fresh + '\n');
        return fresh;
    }
    catch {
        return '';
    }
}
/** This machine's components, each hashed with productId: Linux machine_id, dmi_uuid,
 * root_disk; macOS platform_uuid; Windows machine_guid. In a container (detected, or
 * `container: true`) the image's machine id is not this machine's: the components are
 * the install id kept at installIdPath (on a volume) plus the host identity it can read. */
function machineComponents(productId, opts = {}) {
    const raw = {};
    const run = (cmd, args) => {
        try {
            return (0, child_process_1.execFileSync)(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
        }
        catch {
            return '';
        }
    };
    if (process.platform === 'linux') {
        const container = opts.container || inContainer();
        if (!container)
            raw.machine_id = readTrim('/etc/machine-id');
        raw.dmi_uuid = readTrim('/sys/class/dmi/id/product_uuid');
        if (!container)
            raw.root_disk = rootDiskId();
        if (container && opts.installIdPath)
            raw.install_id = installId(opts.installIdPath);
    }
    else if (process.platform === 'darwin') {
        const m = /"IOPlatformUUID" = "([^"]+)"/.exec(run('ioreg', ['-rd1', '-c', 'IOPlatformExpertDevice']));
        if (m)
            raw.platform_uuid = m[1];
    }
    else if (process.platform === 'win32') {
        const m = /MachineGuid\s+REG_SZ\s+(\S+)/.exec(run('reg', ['query', 'HKLM\\SOFTWARE\\Microsoft\\Cryptography', '/v', 'MachineGuid']));
        if (m)
            raw.machine_guid = m[1];
    }
    const out = {};
    for (const [name, value] of Object.entries(raw))
        if (value)
            out[name] = hashComponent(productId, value);
    return out;
}
// The components an instance id is derived from, most stable first: the OS's own machine
// id, then the container's install id, then hardware.
const INSTANCE_ID_SOURCES = ['machine_id', 'platform_uuid', 'machine_guid', 'install_id', 'dmi_uuid', 'root_disk', 'hostname'];
/** A stable instance id for a machine with these (hashed) components: "m-" and 32 hex
 * digits of SHA-256 over the first of machine_id, platform_uuid, machine_guid, install_id,
 * dmi_uuid, root_disk, hostname it has (else its first component by name). Hashed again,
 * so no raw identifier is sent; '' with no component (client.instanceId() then uses the
 * host name). */
function instanceId(components) {
    let value = INSTANCE_ID_SOURCES.map((name) => components[name]).find((v) => !!v);
    if (!value) {
        const names = Object.keys(components).filter((name) => !!components[name]).sort();
        if (names.length === 0)
            return '';
        value = components[names[0]];
    }
    return 'm-' + crypto.createHash('sha256').update('keyhouse instance id\0' + value).digest('hex').slice(0, 32);
}
/** Writes a file atomically: a temporary file in the same folder, synced, renamed over it. */
function writeFileAtomic(file, data) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${crypto.randomBytes(4).toString('hex')}`);
    const fd = fs.openSync(tmp, 'w', 0o600);
    try {
        fs.writeSync(fd, data);
        fs.fsyncSync(fd);
    }
    finally {
        fs.closeSync(fd);
    }
    try {
        fs.renameSync(tmp, file);
    }
    catch (err) {
        fs.rmSync(tmp, { force: true });
        throw err;
    }
}
/** True when any of the keys verifies the signature: during a planned key rotation an app
 * holds the current and the next key (GET /v1/public-keys), and either may have signed. */
function verifyRSA(publicKeyPem, signed, signature) {
    if (typeof signature !== 'string')
        return false;
    const keys = typeof publicKeyPem === 'string' ? [publicKeyPem] : publicKeyPem;
    return keys.some((key) => {
        try {
            return crypto.verify('sha256', Buffer.from(signed, 'utf8'), key, Buffer.from(signature, 'base64'));
        }
        catch {
            return false;
        }
    });
}
/** Checks an offline export (GET /v1/export-license/{key}/offline) with the server's RSA
 * public key (or any of several: the keys GET /v1/public-keys lists) and no network, then
 * its expiry. Throws KeyhouseError invalid_signature or expired. */
function verifyOfflineExport(exportJson, publicKeyPem, nowMs = Date.now()) {
    let doc;
    try {
        doc = JSON.parse(exportJson);
    }
    catch {
        throw new KeyhouseError('invalid_signature', 'not an offline export');
    }
    // JSON.stringify of the parsed object reproduces the signed bytes (the server writes them so).
    if (!doc || typeof doc.license !== 'object' || !verifyRSA(publicKeyPem, JSON.stringify(doc.license), doc.signature)) {
        throw new KeyhouseError('invalid_signature', 'offline export signature does not verify');
    }
    const lic = doc.license;
    if (lic.expires_at && Date.parse(lic.expires_at) <= nowMs) {
        throw new KeyhouseError('expired', `license expired at ${lic.expires_at}`);
    }
    return lic;
}
/** How far a manifest's issued_at may be ahead of the local clock (seconds). */
exports.MANIFEST_SKEW_SECONDS = 300;
const SIGNED_MANIFEST_FIELDS = ['product_id', 'version', 'channel', 'platform', 'artifact_url', 'checksum', 'release_notes', 'issued_at'];
/** Checks a release manifest before it is believed: the signature (by the key, or any of
 * several keys given) over its fields in the signed order, that it answers the request, and that it was issued at most maxAgeSeconds
 * ago (a signed manifest stays valid after unpublish; the age stops replays). Throws
 * KeyhouseError invalid_signature, manifest_mismatch or manifest_too_old. */
function verifyManifest(release, request, publicKeyPem, nowMs = Date.now(), maxAgeSeconds = exports.MANIFEST_SKEW_SECONDS) {
    const signed = {};
    for (const f of SIGNED_MANIFEST_FIELDS)
        signed[f] = release[f];
    if (!verifyRSA(publicKeyPem, JSON.stringify(signed), release.signature)) {
        throw new KeyhouseError('invalid_signature', 'release manifest signature does not verify');
    }
    if (release.product_id.trim().toLowerCase() !== request.product_id.trim().toLowerCase() ||
        release.channel !== request.channel || release.platform !== request.platform) {
        throw new KeyhouseError('manifest_mismatch', 'release manifest answers another product, channel or platform');
    }
    const age = (nowMs - Date.parse(release.issued_at)) / 1000;
    if (!(age <= maxAgeSeconds && age >= -exports.MANIFEST_SKEW_SECONDS)) {
        throw new KeyhouseError('manifest_too_old', `release manifest issued at ${release.issued_at} is outside its maximum age`);
    }
}
/** How far (seconds) a lease's iat may be ahead of the clock, and the clock may fall back
 * below the newest iat seen, before the verdict is clock_tampered. */
exports.CLOCK_TOLERANCE_SECONDS = 300;
/** Starts the nonce the SDKs send with every lease request: the local clock at the
 * request, in Unix seconds. The server signs it into the lease, so the lease itself says
 * how far this machine's clock was from the server's when it was asked for
 * (leaseClockOffset), and an edited store cannot change that. */
exports.CLOCK_NONCE_PREFIX = 'local-time:';
/** How far (seconds) the server's clock was ahead of this machine's when the lease was
 * asked for: its iat less the local time the SDK's nonce carries (negative when the local
 * clock is ahead; 0 for a lease without that nonce). The lease's times are the server's:
 * its renew_after and exp are judged on the local clock plus this offset, so a machine
 * whose clock is wrong is neither renewing all the time nor unlicensed online. */
function leaseClockOffset(claims) {
    const nonce = claims.nonce || '';
    if (!nonce.startsWith(exports.CLOCK_NONCE_PREFIX) || !/^-?\d+$/.test(nonce.slice(exports.CLOCK_NONCE_PREFIX.length)))
        return 0;
    return claims.iat - Number(nonce.slice(exports.CLOCK_NONCE_PREFIX.length));
}
/** The clock is more than CLOCK_TOLERANCE_SECONDS behind the lease's iat or the newest iat
 * seen (the server's clock). */
function clockBehind(nowSeconds, iat, newestIat = 0) {
    return iat > nowSeconds + exports.CLOCK_TOLERANCE_SECONDS || newestIat > nowSeconds + exports.CLOCK_TOLERANCE_SECONDS;
}
/** Thrown by verifyLease; `claims` are set when the signature verified. */
class LeaseError extends KeyhouseError {
    constructor(code, message, claims, unknownKid = false) {
        super(code, message);
        this.unknownKid = unknownKid;
        this.name = 'LeaseError';
        Object.defineProperty(this, 'claims', { value: claims, enumerable: false });
    }
}
exports.LeaseError = LeaseError;
function b64url(s) {
    if (!/^[A-Za-z0-9_-]*$/.test(s))
        throw new Error('not base64url');
    return Buffer.from(s, 'base64url');
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
function verifyLease(token, keys, c) {
    const parts = typeof token === 'string' ? token.split('.') : [];
    if (parts.length !== 3)
        throw new LeaseError('invalid_lease', 'lease is not a JWS');
    let header;
    let claims;
    let sig;
    try {
        header = JSON.parse(b64url(parts[0]).toString('utf8'));
        sig = b64url(parts[2]);
    }
    catch {
        throw new LeaseError('invalid_lease', 'lease is not a JWS');
    }
    if (header.alg !== 'EdDSA')
        throw new LeaseError('invalid_lease', 'lease is not signed with EdDSA');
    const jwk = (keys.keys || []).find((k) => k.kid === header.kid && k.kty === 'OKP' && k.crv === 'Ed25519');
    if (!jwk)
        throw new LeaseError('invalid_lease', `lease signed by unknown key ${header.kid}`, undefined, true);
    let ok = false;
    try {
        const key = crypto.createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' });
        ok = crypto.verify(null, Buffer.from(`${parts[0]}.${parts[1]}`), key, sig);
    }
    catch {
        ok = false;
    }
    if (!ok)
        throw new LeaseError('invalid_lease', 'lease signature does not verify');
    try {
        claims = JSON.parse(b64url(parts[1]).toString('utf8'));
    }
    catch {
        throw new LeaseError('invalid_lease', 'lease claims are malformed');
    }
    const leaseNow = c.nowSeconds + leaseClockOffset(claims);
    if (claims.aud !== c.productId)
        throw new LeaseError('wrong_product', 'lease is for another product', claims);
    if (c.licenseKey && claims.sub !== c.licenseKey)
        throw new LeaseError('wrong_license', 'lease is for another license', claims);
    if (clockBehind(c.nowSeconds, claims.iat, c.newestIatSeen)) {
        throw new LeaseError('clock_tampered', "the local clock is behind the lease's issue time", claims);
    }
    if (clockBehind(leaseNow, claims.iat, c.newestIatSeen)) {
        throw new LeaseError('clock_tampered', 'the local clock moved back since the lease was asked for', claims);
    }
    if (leaseNow >= claims.exp)
        throw new LeaseError('expired', 'lease expired', claims);
    // A bound lease needs one of its components equal here (the server applies the
    // policy's stricter rule at every renewal).
    const bound = Object.entries(claims.components || {});
    if (bound.length > 0 && !bound.some(([name, v]) => c.components[name] === v)) {
        throw new LeaseError('machine_mismatch', 'lease is bound to another machine', claims);
    }
    return claims;
}
/** The stored lease (verified when it was stored) is of a floating seat. */
function leaseFloats(lease) {
    try {
        return JSON.parse(b64url((lease || '').split('.')[1]).toString('utf8')).floating === true;
    }
    catch {
        return false;
    }
}
/** The tenant_id claim of a lease whose signature is not checked yet ('' if none). */
function unverifiedTenant(lease) {
    try {
        const claims = JSON.parse(b64url(lease.split('.')[1] || '').toString('utf8'));
        return typeof claims?.tenant_id === 'string' ? claims.tenant_id : '';
    }
    catch {
        return '';
    }
}
/** Stores the state in one file, replaced atomically, mode 0600. */
class FileStore {
    constructor(file) {
        this.file = file;
    }
    load() {
        try {
            return fs.readFileSync(this.file, 'utf8');
        }
        catch {
            return null;
        }
    }
    save(data) {
        writeFileAtomic(this.file, data);
    }
}
exports.FileStore = FileStore;
/** Failure backoff: after the n-th failure in a row (no answer, 429, 5xx) nothing is sent
 * for max(Retry-After, 60 s, a draw in [0, min(30 min, 60 s·2^(n-1))]). A 403 Tenant is
 * suspended (a hosted server whose operator suspended the vendor's account) is paced
 * apart, at the refusals' pace: nothing for max(Retry-After, 60 s) after it, one probe at a
 * time, with no growth, so an app whose lease ran out meanwhile is licensed within a
 * minute of the suspension being lifted. */
exports.MIN_FAILING_INTERVAL_MS = 60000;
exports.MAX_BACKOFF_MS = 30 * 60000;
/** A stored refusal last asked about at refusedAt (Unix seconds) is asked about again now,
 * MIN_FAILING_INTERVAL_MS later, or at once when the clock moved back below it (a refusal
 * stored under a clock that ran ahead would otherwise stand until it is reached). */
function refusalDue(nowSeconds, refusedAt) {
    const since = nowSeconds - refusedAt;
    return since < 0 || since >= exports.MIN_FAILING_INTERVAL_MS / 1000;
}
/** How many times trackUsage sends one increment again after no answer or a 5xx, with the
 * same Idempotency-Key, waiting USAGE_RETRY_DELAY_MS·2^i (with jitter) before the i-th. */
exports.USAGE_RETRIES = 2;
exports.USAGE_RETRY_DELAY_MS = 250;
/** One license on this machine, against one server. */
class Client {
    constructor(options) {
        this.failures = 0;
        /** The last answer was a suspension: one probe at a time. */
        this.paced = false;
        this.nextAttemptMs = 0;
        this.renewal = null;
        this.heartbeatTimer = null;
        this.closed = false;
        if (!options.url || !options.productId || !options.key)
            throw new Error('keyhouse: url, productId and key are required');
        this.opts = { requestTimeoutMs: 10000, ...options, url: options.url.replace(/\/+$/, '') };
        this.now = options.now || Date.now;
        const file = options.storePath || path.join(os.homedir(), '.config', 'keyhouse', options.productId.replace(/[^A-Za-z0-9._-]/g, '_') + '.json');
        this.store = options.store || new FileStore(file);
        this.components = options.components || machineComponents(options.productId, { installIdPath: options.store ? undefined : file + '.install-id' });
        this.keys = { keys: [...(options.leaseKeys?.keys || [])] };
        this.state = { key: options.key };
        const stored = this.store.load();
        if (stored) {
            try {
                const s = JSON.parse(stored);
                this.state = s.key === options.key ? s : { key: options.key, newest_iat: s.newest_iat };
            }
            catch {
                /* unreadable: start afresh */
            }
        }
        if (this.state.lease_keys)
            this.mergeKeys(this.state.lease_keys);
        // The server answered a suspension less than a minute ago: a restarted app keeps the pace.
        const suspendedAt = this.state.suspended_at;
        if (suspendedAt) {
            const next = suspendedAt * 1000 + exports.MIN_FAILING_INTERVAL_MS;
            if (this.now() >= suspendedAt * 1000 && this.now() < next) {
                this.paced = true;
                this.nextAttemptMs = next;
            }
        }
    }
    log(line) {
        if (this.opts.logger)
            this.opts.logger(`keyhouse: ${line}`);
    }
    save() {
        this.store.save(JSON.stringify(this.state));
    }
    mergeKeys(set) {
        for (const k of set.keys || [])
            if (!this.keys.keys.some((have) => have.kid === k.kid))
                this.keys.keys.push(k);
    }
    /** The server works and refuses the vendor's account: the refusals' pace, a minute (or
     * the server's Retry-After), with no growth; a run of failures ends here. The time is
     * kept in the store (see State.suspended_at). */
    recordSuspension(retryAfterS) {
        this.failures = 0;
        this.paced = true;
        const now = this.now();
        this.nextAttemptMs = now + Math.max(exports.MIN_FAILING_INTERVAL_MS, retryAfterS * 1000);
        const at = Math.floor(now / 1000);
        if (this.state.suspended_at !== at) {
            this.state.suspended_at = at;
            this.save();
        }
    }
    /** An answer of the server other than a suspension: the backoff and the suspension end. */
    recordAnswer() {
        this.failures = 0;
        this.paced = false;
        this.nextAttemptMs = 0;
        if (this.state.suspended_at) {
            delete this.state.suspended_at;
            this.save();
        }
    }
    recordFailure(retryAfterS) {
        this.failures++;
        const ceiling = Math.min(exports.MAX_BACKOFF_MS, exports.MIN_FAILING_INTERVAL_MS * 2 ** Math.min(this.failures - 1, 10));
        const draw = (this.opts.random || Math.random)() * ceiling;
        this.nextAttemptMs = this.now() + Math.max(draw, exports.MIN_FAILING_INTERVAL_MS, retryAfterS * 1000);
    }
    /** Sends one JSON request; resolves the 200 body. gated false skips the failure
     * backoff's admission, for the bounded retries of one track-usage increment (their
     * failures are still recorded). */
    async request(method, route, body, extraHeaders = {}, gated = true) {
        const now = this.now();
        if (gated && now < this.nextAttemptMs) {
            const wait = Math.ceil((this.nextAttemptMs - now) / 1000);
            const why = this.paced && this.failures === 0 ? 'tenant suspended' : 'server failing';
            throw new KeyhouseError('backing_off', `${why}; next request in ${wait}s`, 0, wait);
        }
        // One probe at a time while failing or suspended: the others wait for its answer.
        if (gated && (this.failures > 0 || this.paced))
            this.nextAttemptMs = now + exports.MIN_FAILING_INTERVAL_MS;
        let resp;
        let text;
        try {
            const headers = { Accept: 'application/json', ...extraHeaders };
            if (body !== undefined)
                headers['Content-Type'] = 'application/json';
            resp = await fetch(this.opts.url + route, {
                method,
                headers,
                body: body === undefined ? undefined : JSON.stringify(body),
                signal: AbortSignal.timeout(this.opts.requestTimeoutMs),
            });
            text = await resp.text();
        }
        catch (err) {
            this.recordFailure(0);
            this.log(`no answer on ${route}: ${err.name}`);
            throw new KeyhouseError('unreachable', 'server unreachable');
        }
        const ra = resp.headers.get('retry-after');
        let retryAfter = ra && /^\d+$/.test(ra.trim()) ? Number(ra) : 0;
        if (ra && !retryAfter && !Number.isNaN(Date.parse(ra)))
            retryAfter = Math.max(0, Math.ceil((Date.parse(ra) - this.now()) / 1000));
        let parsed = null;
        try {
            parsed = JSON.parse(text);
        }
        catch {
            /* not JSON */
        }
        const message = resp.status === 200 ? '' : (parsed && typeof parsed.error === 'string' && parsed.error) || `HTTP ${resp.status}`;
        const code = resp.status === 200 ? '' : errorCode(resp.status, message);
        if (resp.status === 429 || resp.status >= 500)
            this.recordFailure(retryAfter);
        else if (code === 'tenant_suspended')
            this.recordSuspension(retryAfter);
        else
            this.recordAnswer();
        if (resp.status !== 200) {
            this.log(`${route} refused: ${resp.status} ${code}`);
            throw new KeyhouseError(code, message, resp.status, retryAfter);
        }
        if (parsed === null)
            throw new KeyhouseError('server_error', 'answer is not JSON', 200);
        return parsed;
    }
    /** POST /v1/verify-license; an invalid license throws (license_not_found, license_expired, license_not_active). */
    async verify() {
        return this.request('POST', '/v1/verify-license', { key: this.opts.key });
    }
    /** POST /v1/validate-license for this machine's seat. */
    async validate() {
        if (!this.state.instance_id)
            throw new KeyhouseError('not_activated', 'not activated on this machine');
        const r = await this.request('POST', '/v1/validate-license', { key: this.opts.key, instance_id: this.state.instance_id });
        return r.valid;
    }
    /** This machine's instance id for activate(): instanceId() of the client's components,
     * or, with none, of the host name hashed with the product id. Stable across runs and
     * reinstalls, different on another machine, and never a raw identifier. */
    instanceId() {
        return instanceId(this.components) || instanceId({ hostname: hashComponent(this.opts.productId, os.hostname()) });
    }
    /** Takes a seat for instanceId (POST /v1/activate-license; client.instanceId() gives this
     * machine's) and stores its token. When the seat exists but the store holds no token for
     * it (a reinstall), a seat bound to this machine is proven by its components and gets a
     * new token (POST /v1/leases with instance_id, docs/leases.md "Reinstall"); an unbound
     * one throws invalid_activation_token: release it (the customer portal) and activate again.
     * Before taking a seat it asks verify-license for the license's product: a license of
     * another product throws wrong_product and takes no seat. */
    async activate(instanceId) {
        const held = this.state.instance_id === instanceId && !!this.state.token;
        if (!held) {
            // A license of another product would take a seat whose leases this app refuses
            // (wrong_product): refuse it here, before a seat is taken.
            const lic = await this.verify();
            if (lic.product_id !== this.opts.productId)
                throw new KeyhouseError('wrong_product', "the license is for another product than this app's; no seat was taken");
        }
        const r = await this.request('POST', '/v1/activate-license', { key: this.opts.key, instance_id: instanceId });
        let lease;
        if (!r.token && !held) {
            ({ token: r.token, lease } = await this.reinstall(instanceId));
        }
        if (r.token || this.state.instance_id !== instanceId) {
            this.state = { key: this.opts.key, instance_id: instanceId, token: r.token, lease, newest_iat: this.state.newest_iat, lease_keys: this.state.lease_keys, tenant_id: this.state.tenant_id };
        }
        this.save();
        return { alreadyActivated: !!r.alreadyActivated, instanceId };
    }
    /** A new token for an existing seat bound to this machine. The lease that comes with it
     * is stored unverified: check() verifies a stored lease before believing it. */
    async reinstall(instanceId) {
        let r;
        try {
            r = await this.request('POST', '/v1/leases', { key: this.opts.key, instance_id: instanceId, components: this.components });
        }
        catch (err) {
            if (err instanceof KeyhouseError && err.code === 'invalid_activation_token') {
                throw new KeyhouseError(err.code, 'the seat of this instance id exists but its token was lost, and the seat is not bound to this machine: release the seat and activate again', err.status);
            }
            throw err;
        }
        if (!r.token)
            throw new KeyhouseError('server_error', 'the reinstall answer has no token', 200);
        return { token: r.token, lease: r.lease };
    }
    /** Frees this machine's seat and forgets its token and lease; resolves whether one was freed. */
    async deactivate() {
        if (!this.state.token)
            throw new KeyhouseError('not_activated', 'not activated on this machine');
        const r = await this.request('POST', '/v1/deactivate-license', { key: this.opts.key, token: this.state.token });
        this.state = { key: this.opts.key, newest_iat: this.state.newest_iat, lease_keys: this.state.lease_keys, tenant_id: this.state.tenant_id };
        this.save();
        return r.deactivated;
    }
    /** Adds n to a metric of this seat; resolves the new running total. Each call is one
     * logical increment with one Idempotency-Key (a fresh one, or opts.idempotencyKey, for an
     * app that retries an increment later): no answer or a 5xx is retried USAGE_RETRIES times
     * with that key, so an increment whose answer was lost counts once. */
    async trackUsage(metric, n = 1, opts = {}) {
        if (!this.state.token)
            throw new KeyhouseError('not_activated', 'not activated on this machine');
        const body = { key: this.opts.key, token: this.state.token, metric, increment: n };
        const headers = { 'Idempotency-Key': opts.idempotencyKey || 'usage-' + crypto.randomBytes(16).toString('hex') };
        for (let attempt = 0;; attempt++) {
            try {
                return (await this.request('POST', '/v1/track-usage', body, headers, attempt === 0)).usage;
            }
            catch (err) {
                const retry = err instanceof KeyhouseError && (err.code === 'unreachable' || err.status >= 500);
                if (!retry || attempt === exports.USAGE_RETRIES)
                    throw err;
                const wait = exports.USAGE_RETRY_DELAY_MS * 2 ** attempt * (0.5 + (this.opts.random || Math.random)());
                await new Promise((resolve) => setTimeout(resolve, wait));
            }
        }
    }
    /** POST /v1/usage-report. */
    async usageReport() {
        return this.request('POST', '/v1/usage-report', { key: this.opts.key });
    }
    /** Asks for a release newer than currentVersion; resolves null when there is none, and a
     * release only after verifyManifest accepted it. */
    async checkUpdate(currentVersion, channel = 'stable', platform = '') {
        const keys = this.pinnedPublicKeys();
        if (keys.length === 0)
            throw new Error('keyhouse: checkUpdate needs publicKeyPem');
        // The server answers "" as the stable channel, so the manifest names stable: ask for
        // stable, so that the question compared with the manifest is the one answered.
        const request = { product_id: this.opts.productId, channel: channel || 'stable', platform };
        const r = await this.request('POST', '/v1/check-update', { key: this.opts.key, ...request, current_version: currentVersion });
        if (!r.update_available || !r.release)
            return null;
        verifyManifest(r.release, request, keys, this.now());
        return r.release;
    }
    /** Checks an offline export with the pinned public keys at the client's clock. */
    verifyOfflineExport(exportJson) {
        const keys = this.pinnedPublicKeys();
        if (keys.length === 0)
            throw new Error('keyhouse: verifyOfflineExport needs publicKeyPem');
        return verifyOfflineExport(exportJson, keys, this.now());
    }
    /** publicKeyPem and publicKeyPems, the RSA keys the app accepts. */
    pinnedPublicKeys() {
        return [this.opts.publicKeyPem ?? '', ...(this.opts.publicKeyPems ?? [])].filter((key) => key !== '');
    }
    async checkLease(lease) {
        const c = { productId: this.opts.productId, licenseKey: this.opts.key, nowSeconds: Math.floor(this.now() / 1000), newestIatSeen: this.state.newest_iat, components: this.components };
        try {
            return verifyLease(lease, this.keys, c);
        }
        catch (err) {
            if (!(err instanceof LeaseError) || !err.unknownKid || this.opts.noKeyRefresh)
                throw err;
            // Hosted, the key set is the tenant's: pinned (tenantId), else the one a lease
            // verified for before, else the one this lease names. The named tenant is not yet
            // trusted: it only chooses which of this server's key sets is fetched, the lease must
            // still verify against one of that tenant's keys, and its product and license are
            // checked after that (a product belongs to one tenant).
            const learned = this.state.tenant_id;
            const tenant = this.opts.tenantId || learned || unverifiedTenant(lease);
            let fetched;
            try {
                fetched = await this.request('GET', '/v1/lease-keys' + (tenant ? `?tenant_id=${encodeURIComponent(tenant)}` : ''));
            }
            catch (fetchErr) {
                throw new LeaseError('lease_keys_unavailable', `the lease's signing key is not pinned and the key set could not be fetched: ${fetchErr.message}`);
            }
            this.mergeKeys(fetched);
            this.state.lease_keys = fetched;
            this.save();
            const claims = verifyLease(lease, this.keys, c);
            if (!this.opts.tenantId && !learned && tenant) {
                this.state.tenant_id = tenant;
                this.save();
            }
            return claims;
        }
    }
    /** The lease's exp and renew_after are given on this machine's clock (the server's times
     * less the lease's clock offset), so an app that schedules its own checks by them keeps
     * to the server's timing whatever the clock. */
    static verdictOf(claims, offline) {
        const offset = leaseClockOffset(claims);
        return {
            licensed: true, reason: 'licensed', offline, tier: claims.tier, entitlements: claims.entitlements, limits: claims.limits,
            floating: claims.floating, leaseExpiresAt: new Date((claims.exp - offset) * 1000), renewAfter: new Date((claims.renew_after - offset) * 1000),
            licenseExpiresAt: claims.license_expires_at == null ? null : new Date(claims.license_expires_at * 1000),
        };
    }
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
    async check() {
        if (!this.state.token)
            return { licensed: false, reason: 'not_activated' };
        // The server refused the license at a renewal (revoked, deleted, past its expiry): it is
        // asked again once a minute, so a license reinstated or extended is licensed then; in
        // between, and out of reach, the refusal stands.
        if (this.state.refusal) {
            const now = Math.floor(this.now() / 1000);
            if (!refusalDue(now, this.state.refused_at || 0))
                return { licensed: false, reason: this.state.refusal };
            // This check is the ask of this minute: checks running beside it answer the refusal.
            this.state.refused_at = now;
            this.save();
            return this.renew();
        }
        if (this.state.lease) {
            try {
                const v = Client.verdictOf(await this.checkLease(this.state.lease), true);
                if (this.now() >= v.renewAfter.getTime() && !this.renewal) {
                    this.renewal = this.renew().finally(() => {
                        this.renewal = null;
                    });
                }
                return v;
            }
            catch (err) {
                const e = err;
                const movedBack = e.code === 'clock_tampered' && !!e.claims && !clockBehind(Math.floor(this.now() / 1000), e.claims.iat, this.state.newest_iat);
                if (err instanceof KeyhouseError && e.code !== 'expired' && !movedBack)
                    return { licensed: false, reason: e.code };
                // The lease ran out, or the clock moved back since it was asked for but is not
                // behind the server's: a lease asked for now measures the clock anew (out of
                // reach, the stored lease answers as before).
            }
        }
        return this.renew();
    }
    /** The background renewal check() started, if one runs. */
    get pendingRenewal() {
        return this.renewal;
    }
    /** Asks the server for a new lease now (POST /v1/leases); resolves the verdict. */
    async renew() {
        if (!this.state.token)
            return { licensed: false, reason: 'not_activated' };
        let lease;
        const asked = Math.floor(this.now() / 1000);
        try {
            const nonce = exports.CLOCK_NONCE_PREFIX + asked;
            lease = (await this.request('POST', '/v1/leases', { key: this.opts.key, token: this.state.token, components: this.components, nonce })).lease;
        }
        catch (err) {
            const e = err;
            // No answer for the license: the server failed, or it refuses the vendor's account (a
            // suspension is not the customer's license). The stored lease and token are kept, as
            // out of reach; the suspension, when the server said so, is in the state now.
            if (!(e instanceof KeyhouseError) || e.status === 0 || e.status === 429 || e.status >= 500 || e.code === 'tenant_suspended')
                return this.offlineVerdict();
            let reason = { seat_lease_expired: 'seat_lapsed', invalid_activation_token: 'not_activated', fingerprint_mismatch: 'machine_mismatch' }[e.code] || e.code;
            // The floating seat this client held is gone: released by another copy of the app
            // sharing its store and instance id, or in the portal. For the app it is a lapse like
            // any other: reported, and activate takes a seat again.
            if (e.code === 'invalid_activation_token' && leaseFloats(this.state.lease))
                reason = 'seat_lapsed';
            const lapsedLease = this.state.lease;
            delete this.state.lease;
            delete this.state.refusal;
            delete this.state.refused_at;
            if (['license_not_found', 'license_not_active', 'license_expired'].includes(e.code)) {
                this.state.refusal = reason;
                this.state.refused_at = asked;
            }
            if (['seat_lease_expired', 'invalid_activation_token'].includes(e.code))
                delete this.state.token;
            this.save();
            this.log(`not licensed: ${reason}`);
            const v = { licensed: false, reason };
            if (reason === 'seat_lapsed')
                this.reportLapse(lapsedLease, v);
            return v;
        }
        try {
            const claims = await this.checkLease(lease);
            this.state.lease = lease;
            this.state.newest_iat = Math.max(this.state.newest_iat || 0, claims.iat);
            delete this.state.refusal;
            delete this.state.refused_at;
            this.save();
            return Client.verdictOf(claims, false);
        }
        catch (err) {
            const e = err;
            if (e instanceof LeaseError && e.code === 'clock_tampered' && e.claims) {
                // A genuine lease, refused only because this clock is behind the server's: kept, so
                // later checks answer clock_tampered from it without asking again, and licensed
                // once the clock is right.
                this.state.lease = lease;
                this.state.newest_iat = Math.max(this.state.newest_iat || 0, e.claims.iat);
                delete this.state.refusal;
                delete this.state.refused_at;
                this.save();
            }
            return { licensed: false, reason: err instanceof KeyhouseError ? err.code : 'invalid_lease' };
        }
    }
    /** The verdict from the stored lease while the server cannot be reached, or answers that
     * the vendor's account is suspended. */
    async offlineVerdict() {
        // The server's last answer was a refusal: it stands until the server says otherwise.
        if (this.state.refusal)
            return { licensed: false, reason: this.state.refusal };
        // The server's last answer was a suspension of the vendor's account: what ends the app's
        // license is that, not the server being out of reach.
        const suspended = !!this.state.suspended_at;
        if (!this.state.lease)
            return { licensed: false, reason: suspended ? 'tenant_suspended' : 'unreachable' };
        try {
            return Client.verdictOf(await this.checkLease(this.state.lease), true);
        }
        catch (err) {
            const e = err;
            if (e.code === 'expired' && e.claims?.floating) {
                // A floating seat lives only while leased: the server let it go when this lease
                // ran out, and says seat_lapsed once it is reached again.
                const v = { licensed: false, reason: 'seat_lapsed' };
                this.reportLapse(this.state.lease, v);
                return v;
            }
            if (e.code === 'expired' && suspended)
                return { licensed: false, reason: 'tenant_suspended' };
            return { licensed: false, reason: e instanceof KeyhouseError ? e.code : 'invalid_lease' };
        }
    }
    /** Calls onLapsed once per lapse: the lapse of one lease is reported by the first check
     * that finds it, offline or from the server, and not by the checks after it. */
    reportLapse(lease, v) {
        if (lease && this.lapseReported === lease)
            return;
        this.lapseReported = lease;
        if (this.opts.onLapsed)
            this.opts.onLapsed(v);
    }
    /** Keeps a floating seat leased: renews at each lease's renew_after until close(),
     * reporting a lapsed seat through onLapsed. The timer does not keep Node running. */
    startHeartbeat() {
        const beat = async () => {
            if (this.closed)
                return;
            let v = await this.check();
            // check() renews a lease past its renew_after in the background, one renewal at a
            // time: the lease it brings sets the next wait.
            if (v.licensed && v.renewAfter && this.now() >= v.renewAfter.getTime() && this.renewal) {
                await this.renewal;
                v = await this.check();
            }
            const wait = v.licensed && v.renewAfter ? Math.max(v.renewAfter.getTime() - this.now(), 1000) : exports.MIN_FAILING_INTERVAL_MS;
            if (!this.closed)
                this.heartbeatTimer = this.heartbeatAfter(beat, wait);
        };
        void beat();
    }
    /** The heartbeat's timer, which does not keep Node running (the live tests move their
     * clock instead). */
    heartbeatAfter(beat, waitMs) {
        return setTimeout(beat, waitMs).unref();
    }
    /** Stops the heartbeat and, for a floating seat, releases it at once. */
    async close() {
        this.closed = true;
        if (this.heartbeatTimer)
            clearTimeout(this.heartbeatTimer);
        if (this.renewal)
            await this.renewal;
        if (!this.state.token || !this.state.lease)
            return;
        if (leaseFloats(this.state.lease))
            await this.deactivate();
    }
}
exports.Client = Client;
