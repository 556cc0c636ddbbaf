package keyhouse

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

// HashComponent is the value sent for one machine component: hex HMAC-SHA256 keyed with
// the product id over the trimmed raw value, so the same machine gives each vendor's
// product different values (no cross-vendor identifier leaves the machine).
func HashComponent(productID, raw string) string {
	m := hmac.New(sha256.New, []byte(productID))
	m.Write([]byte(strings.TrimSpace(raw)))
	return hex.EncodeToString(m.Sum(nil))
}

// instanceIDSources are the components an instance id is derived from, most stable
// first: the OS's own machine id, then the container's install id, then hardware.
var instanceIDSources = []string{"machine_id", "platform_uuid", "machine_guid", "install_id", "dmi_uuid", "root_disk", "hostname"}

// InstanceID is a stable instance id for a machine with these (hashed) components: "m-"
// and 32 hex digits of SHA-256 over the first of machine_id, platform_uuid, machine_guid,
// install_id, dmi_uuid, root_disk, hostname it has (else its first component by name).
// It is hashed again, so no raw identifier is sent even when an app passes components of
// its own; it changes only when that one component does. With no component at all it is
// "" (Client.InstanceID then uses the host name).
func InstanceID(components map[string]string) string {
	value := ""
	for _, name := range instanceIDSources {
		if v := components[name]; v != "" {
			value = v
			break
		}
	}
	if value == "" {
		names := make([]string, 0, len(components))
		for name, v := range components {
			if v != "" {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			return ""
		}
		slices.Sort(names)
		value = components[names[0]]
	}
	sum := sha256.Sum256([]byte("keyhouse instance id\x00" + value))
	return "m-" + hex.EncodeToString(sum[:16])
}

// ComponentOptions tune MachineComponents.
type ComponentOptions struct {
	// Container forces the container mode on (true) or lets it be detected (false).
	Container bool
	// InstallIDPath is where the container mode keeps its install id (a random value made
	// once); put it on a volume that outlives the container.
	InstallIDPath string
}

// MachineComponents collects this machine's components, each hashed with productID:
// Linux machine_id (/etc/machine-id), dmi_uuid (/sys/class/dmi/id/product_uuid, often
// root-only) and root_disk (the file-system UUID of /); macOS platform_uuid
// (IOPlatformUUID); Windows machine_guid (MachineGuid). In a container (detected, or
// forced) the machine id of the image is not this machine's, so the components are the
// install_id kept at InstallIDPath plus whatever host identity the container can read.
func MachineComponents(productID string, opts ComponentOptions) map[string]string {
	raw := map[string]string{}
	switch runtime.GOOS {
	case "linux":
		container := opts.Container || InContainer()
		if !container {
			raw["machine_id"] = readTrim("/etc/machine-id")
		}
		raw["dmi_uuid"] = readTrim("/sys/class/dmi/id/product_uuid")
		if !container {
			raw["root_disk"] = rootDiskID()
		}
		if container && opts.InstallIDPath != "" {
			raw["install_id"] = installID(opts.InstallIDPath)
		}
	case "darwin":
		out, _ := exec.Command("ioreg", "-rd1", "-c", "IOPlatformExpertDevice").Output()
		if m := regexp.MustCompile(`"IOPlatformUUID" = "([^"]+)"`).FindSubmatch(out); m != nil {
			raw["platform_uuid"] = string(m[1])
		}
	case "windows":
		out, _ := exec.Command("reg", "query", `HKLM\SOFTWARE\Microsoft\Cryptography`, "/v", "MachineGuid").Output()
		if m := regexp.MustCompile(`MachineGuid\s+REG_SZ\s+(\S+)`).FindSubmatch(out); m != nil {
			raw["machine_guid"] = string(m[1])
		}
	}
	out := map[string]string{}
	for name, value := range raw {
		if value != "" {
			out[name] = HashComponent(productID, value)
		}
	}
	return out
}

// InContainer reports whether this process runs in a container (Docker, Podman,
// Kubernetes, containerd).
func InContainer() bool {
	for _, f := range []string{"/.dockerenv", "/run/.containerenv"} {
		if _, err := os.Stat(f); err == nil {
			return true
		}
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return true
	}
	cg, _ := os.ReadFile("/proc/1/cgroup")
	return regexp.MustCompile(`docker|kubepods|containerd|libpod`).Match(cg)
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// rootDiskID is the UUID of the file system mounted at /, found through /dev/disk/by-uuid.
func rootDiskID() string {
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	var source string
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == "/" {
			for i, v := range f {
				if v == "-" && i+2 < len(f) {
					source = f[i+2]
				}
			}
		}
	}
	if source == "" {
		return ""
	}
	entries, _ := os.ReadDir("/dev/disk/by-uuid")
	for _, e := range entries {
		target, err := filepath.EvalSymlinks(filepath.Join("/dev/disk/by-uuid", e.Name()))
		if err == nil && target == source {
			return e.Name()
		}
	}
	return ""
}

// installID reads the install id at path, making it on first use.
func installID(path string) string {
	if id := readTrim(path); id != "" {
		return id
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	if err := writeFileAtomic(path, []byte(id+"\n")); err != nil {
		return ""
	}
	return id
}
