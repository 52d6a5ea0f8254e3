// A stand-in libnvidia-ml.so.1 for tests on hosts without the NVIDIA driver.
// It exports the NVML entry points NvmlSampler uses and answers from a script
// file named by $HT_STUB_NVML_SCRIPT, re-read at every call so that a test can
// change the GPU's state while a sampler runs (replace the file atomically:
// write elsewhere, then rename). One directive a line:
//
//   devices N                      N GPUs (default 0)
//   name DEV TEXT...               device name (default "Stub GPU DEV")
//   util DEV GPU_PCT MEM_PCT       nvmlDeviceGetUtilizationRates
//   power DEV MILLIWATTS           nvmlDeviceGetPowerUsage
//   memory DEV USED TOTAL          nvmlDeviceGetMemoryInfo, bytes
//   proc DEV PID SM_PCT [TS_US]    a per-process sample, stamped now (CLOCK_REALTIME us) unless TS_US
//   fail FUNCTION CODE [DEV]       FUNCTION returns CODE (an nvmlReturn_t), on DEV or on all devices
//
// Types and codes follow NVML's public ABI (nvml.h), redeclared here because
// the header is not installed.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_UNKNOWN = 999,
};

struct nvmlDevice_st {
  unsigned index;
};
typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct {
  unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

#define MAX_DEVICES 16
#define MAX_PROCS 64
#define MAX_FAILURES 32

struct stub_device {
  char name[96];
  unsigned gpu_util, mem_util, power_mw;
  unsigned long long mem_used, mem_total;
};

struct stub_proc {
  unsigned device, pid, sm_util;
  unsigned long long ts_us;
};

struct stub_failure {
  char function[64];
  int code;
  int device;  // -1: every device
};

struct stub_script {
  unsigned devices;
  struct stub_device device[MAX_DEVICES];
  unsigned procs;
  struct stub_proc proc[MAX_PROCS];
  unsigned failures;
  struct stub_failure failure[MAX_FAILURES];
};

static struct nvmlDevice_st handles[MAX_DEVICES];
static int init_refcount;
static unsigned long long last_seen_by_device[MAX_DEVICES];

static int initialized(void) { return __atomic_load_n(&init_refcount, __ATOMIC_SEQ_CST) > 0; }

static unsigned long long realtime_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
}

static void read_script(struct stub_script* script) {
  memset(script, 0, sizeof(*script));
  for (unsigned i = 0; i < MAX_DEVICES; ++i)
    snprintf(script->device[i].name, sizeof(script->device[i].name), "Stub GPU %u", i);
  const char* path = getenv("HT_STUB_NVML_SCRIPT");
  FILE* file = path != NULL ? fopen(path, "re") : NULL;
  if (file == NULL) return;
  char line[512];
  unsigned long long now_us = realtime_us();
  while (fgets(line, sizeof(line), file) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    unsigned dev = 0, a = 0, b = 0, n = 0;
    unsigned long long x = 0, y = 0;
    char word[64];
    int offset = 0;
    if (sscanf(line, "devices %u", &n) == 1) {
      script->devices = n < MAX_DEVICES ? n : MAX_DEVICES;
    } else if (sscanf(line, "name %u %n", &dev, &offset) == 1 && offset > 0 && dev < MAX_DEVICES) {
      snprintf(script->device[dev].name, sizeof(script->device[dev].name), "%s", line + offset);
    } else if (sscanf(line, "util %u %u %u", &dev, &a, &b) == 3 && dev < MAX_DEVICES) {
      script->device[dev].gpu_util = a;
      script->device[dev].mem_util = b;
    } else if (sscanf(line, "power %u %u", &dev, &a) == 2 && dev < MAX_DEVICES) {
      script->device[dev].power_mw = a;
    } else if (sscanf(line, "memory %u %llu %llu", &dev, &x, &y) == 3 && dev < MAX_DEVICES) {
      script->device[dev].mem_used = x;
      script->device[dev].mem_total = y;
    } else if (strncmp(line, "proc ", 5) == 0 && script->procs < MAX_PROCS) {
      int fields = sscanf(line, "proc %u %u %u %llu", &dev, &a, &b, &x);
      if (fields >= 3) {
        struct stub_proc* proc = &script->proc[script->procs++];
        proc->device = dev;
        proc->pid = a;
        proc->sm_util = b;
        proc->ts_us = fields == 4 ? x : now_us;
      }
    } else if (strncmp(line, "fail ", 5) == 0 && script->failures < MAX_FAILURES) {
      int code = 0, device = -1;
      int fields = sscanf(line, "fail %63s %d %d", word, &code, &device);
      if (fields >= 2) {
        struct stub_failure* failure = &script->failure[script->failures++];
        snprintf(failure->function, sizeof(failure->function), "%s", word);
        failure->code = code;
        failure->device = fields == 3 ? device : -1;
      }
    }
  }
  fclose(file);
}

// The scripted failure of `function` on `device` (-1: not a device call), else NVML_SUCCESS.
static nvmlReturn_t scripted_failure(const struct stub_script* script, const char* function, int device) {
  for (unsigned i = 0; i < script->failures; ++i) {
    const struct stub_failure* failure = &script->failure[i];
    if (strcmp(failure->function, function) == 0 && (failure->device < 0 || failure->device == device)) {
      return failure->code;
    }
  }
  return NVML_SUCCESS;
}

// Common checks of a device call; on success *script is loaded and *index set.
static nvmlReturn_t device_call(struct stub_script* script, const char* function, nvmlDevice_t device,
                                unsigned* index) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  read_script(script);
  if (device == NULL || device < handles || device >= handles + MAX_DEVICES)
    return NVML_ERROR_INVALID_ARGUMENT;
  *index = device->index;
  if (*index >= script->devices) return NVML_ERROR_INVALID_ARGUMENT;
  return scripted_failure(script, function, (int)*index);
}

EXPORT nvmlReturn_t nvmlInit_v2(void) {
  struct stub_script script;
  read_script(&script);
  nvmlReturn_t rc = scripted_failure(&script, "nvmlInit_v2", -1);
  if (rc != NVML_SUCCESS) return rc;
  __atomic_add_fetch(&init_refcount, 1, __ATOMIC_SEQ_CST);
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  __atomic_sub_fetch(&init_refcount, 1, __ATOMIC_SEQ_CST);
  return NVML_SUCCESS;
}

EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  struct stub_script script;
  read_script(&script);
  nvmlReturn_t rc = scripted_failure(&script, "nvmlDeviceGetCount_v2", -1);
  if (rc != NVML_SUCCESS) return rc;
  *count = script.devices;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  struct stub_script script;
  read_script(&script);
  if (device == NULL || index >= script.devices) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlReturn_t rc = scripted_failure(&script, "nvmlDeviceGetHandleByIndex_v2", (int)index);
  if (rc != NVML_SUCCESS) return rc;
  handles[index].index = index;
  *device = &handles[index];
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  struct stub_script script;
  unsigned index = 0;
  nvmlReturn_t rc = device_call(&script, "nvmlDeviceGetName", device, &index);
  if (rc != NVML_SUCCESS) return rc;
  if (name == NULL || strlen(script.device[index].name) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  strcpy(name, script.device[index].name);
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  struct stub_script script;
  unsigned index = 0;
  nvmlReturn_t rc = device_call(&script, "nvmlDeviceGetUtilizationRates", device, &index);
  if (rc != NVML_SUCCESS) return rc;
  if (utilization == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  utilization->gpu = script.device[index].gpu_util;
  utilization->memory = script.device[index].mem_util;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* power) {
  struct stub_script script;
  unsigned index = 0;
  nvmlReturn_t rc = device_call(&script, "nvmlDeviceGetPowerUsage", device, &index);
  if (rc != NVML_SUCCESS) return rc;
  if (power == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *power = script.device[index].power_mw;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  struct stub_script script;
  unsigned index = 0;
  nvmlReturn_t rc = device_call(&script, "nvmlDeviceGetMemoryInfo", device, &index);
  if (rc != NVML_SUCCESS) return rc;
  if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  memory->used = script.device[index].mem_used;
  memory->total = script.device[index].mem_total;
  memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
  return NVML_SUCCESS;
}

// As NVML documents it: only samples newer than lastSeenTimeStamp; NOT_FOUND when there are none; a null
// buffer or a short one gets INSUFFICIENT_SIZE with the count needed.
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                    nvmlProcessUtilizationSample_t* utilization,
                                                    unsigned* count, unsigned long long last_seen_us) {
  struct stub_script script;
  unsigned index = 0;
  nvmlReturn_t rc = device_call(&script, "nvmlDeviceGetProcessUtilization", device, &index);
  if (rc != NVML_SUCCESS) return rc;
  if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  __atomic_store_n(&last_seen_by_device[index], last_seen_us, __ATOMIC_SEQ_CST);
  unsigned matching = 0;
  for (unsigned i = 0; i < script.procs; ++i) {
    if (script.proc[i].device == index && script.proc[i].ts_us > last_seen_us) ++matching;
  }
  if (matching == 0) return NVML_ERROR_NOT_FOUND;
  if (utilization == NULL || *count < matching) {
    *count = matching;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  unsigned written = 0;
  for (unsigned i = 0; i < script.procs; ++i) {
    const struct stub_proc* proc = &script.proc[i];
    if (proc->device != index || proc->ts_us <= last_seen_us) continue;
    nvmlProcessUtilizationSample_t* sample = &utilization[written++];
    memset(sample, 0, sizeof(*sample));
    sample->pid = proc->pid;
    sample->timeStamp = proc->ts_us;
    sample->smUtil = proc->sm_util;
  }
  *count = written;
  return NVML_SUCCESS;
}

// For tests: how many nvmlInit_v2 calls are not yet matched by nvmlShutdown.
EXPORT int ht_stub_nvml_init_refcount(void) { return __atomic_load_n(&init_refcount, __ATOMIC_SEQ_CST); }

// For tests: the lastSeenTimeStamp of the latest nvmlDeviceGetProcessUtilization call on `device`.
EXPORT unsigned long long ht_stub_nvml_last_seen(unsigned device) {
  return device < MAX_DEVICES ? __atomic_load_n(&last_seen_by_device[device], __ATOMIC_SEQ_CST) : 0;
}
