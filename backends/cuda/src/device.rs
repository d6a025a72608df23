//! One GPU: context, stream, cuBLAS handle and the NVRTC-compiled kernels, with checked launches on raw
//! device addresses. The only module that calls cudarc's unsafe launch and GEMM entry points.

use crate::error::{CudaError, Result};
use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use std::sync::Arc;

/// The kernels' source.
pub const KERNELS: &str = include_str!("kernels.cu");

const KERNEL_NAMES: [&str; 11] = [
    "gather_rows",
    "add_rmsnorm",
    "qk_norm_rope_store",
    "swiglu",
    "attn_decode_partial",
    "attn_decode_reduce",
    "attn_prefill",
    "attn_prefill_wg",
    "argmax_rows",
    "fill_random",
    "gemv_small",
];

/// Shared-memory row stride of the attention kernels' K/V tiles, in bf16 (`KS` = head dim + 8).
const TILE_STRIDE: u32 = 128 + 8;
/// Dynamic shared memory of the kernels that use more than the default 48 KiB, bytes: the decode
/// attention holds two chunks of 64 keys (K and V) and a 16-row query tile (`DEC_SMEM`); the prefill
/// attention two tiles of 32 keys and the query rows of its eight units (`PF_SMEM`).
/// The Hopper prefill attention (`WG_SMEM`): 1 KiB of alignment slack, two warpgroups' 64 query rows,
/// four stages of a 64-key K and V tile, and the stages' two mbarriers.
pub const DYNAMIC_SMEM: [(&str, u32); 3] = [
    ("attn_decode_partial", (4 * 64 + 16) * TILE_STRIDE * 2),
    ("attn_prefill", (4 * 32 + 8 * 16) * TILE_STRIDE * 2),
    ("attn_prefill_wg", WG_SMEM),
];
const WG_SMEM: u32 = 1024 + 2 * 64 * 128 * 2 + 4 * 2 * 64 * 128 * 2 + 2 * 4 * 8;

/// Most rows a linear layer may have to run as [`Device::linear`]'s weight-streaming kernel (the kernel's
/// `GV_MAXT`); more go to cuBLAS.
const GEMV_MAX_ROWS: u32 = 4;
/// Rows up to which [`Device::linear`] uses `gemv_small` unless `SERVERBENCH_GEMV_MAX_ROWS` says
/// otherwise: on the H200 it beats cuBLAS at one row (4.92 against 5.03 ms for a batch-1 decode step at
/// 4K context) and loses at two or more (docs/cuda-engine.md).
const GEMV_DEFAULT_ROWS: u32 = 1;
/// Most bytes of input rows `gemv_small` stages in shared memory (4 rows of 16,384 bf16).
const GEMV_SMEM_MAX: u32 = 128 << 10;

/// A device buffer and its address (buffers live as long as the engine; kernels take addresses).
pub struct Buffer<T> {
    slice: CudaSlice<T>,
    /// Device address of element 0.
    pub ptr: u64,
    /// Elements.
    pub len: usize,
}

impl<T> Buffer<T> {
    /// Address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        debug_assert!(i <= self.len);
        self.ptr + (i * std::mem::size_of::<T>()) as u64
    }

    /// The underlying slice.
    pub fn slice(&self) -> &CudaSlice<T> {
        &self.slice
    }

    /// The underlying slice, writable.
    pub fn slice_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

/// One GPU with its stream, cuBLAS handle and kernels.
pub struct Device {
    /// The context.
    pub ctx: Arc<CudaContext>,
    /// The stream every launch goes to.
    pub stream: Arc<CudaStream>,
    blas: CudaBlas,
    _blas_workspace: CudaSlice<u8>,
    kernels: Vec<CudaFunction>,
    /// Linear layers of at most this many rows stream their weights with `gemv_small` instead of cuBLAS
    /// (`SERVERBENCH_GEMV_MAX_ROWS`, 0 to 4; default 1).
    pub gemv_max_rows: u32,
    /// The prefill attention kernel and its threads per block (`SERVERBENCH_PREFILL_ATTN`).
    pub prefill_attn: (&'static str, u32),
    /// Whether models on this device replay decode-only steps as CUDA graphs.
    pub cuda_graphs: bool,
    /// Streaming multiprocessors (sizes the grid of grid-stride kernels).
    pub sms: u32,
    /// Device name.
    pub name: String,
}

/// Bytes of cuBLAS workspace (Hopper's cuBLAS asks for up to 32 MiB).
const BLAS_WORKSPACE: usize = 32 << 20;

/// How the engine's kernels are built and chosen. The library reads no environment: the binary
/// builds these from its variables with [`CudaOptions::from_vars`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaOptions {
    /// Directories NVRTC searches for the CUDA headers first (`/usr/local/cuda/include` after them).
    pub include_dirs: Vec<String>,
    /// The prefill attention kernel: `wg` (Hopper's warpgroup MMA, sm_90 only) or `mma`; `None`: `wg` on
    /// sm_90, `mma` elsewhere.
    pub prefill_attn: Option<String>,
    /// Linear layers of at most this many rows stream their weights with the GEMV kernel (0 to 4).
    pub gemv_max_rows: u32,
    /// Replay decode-only steps as captured CUDA graphs.
    pub cuda_graphs: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            include_dirs: Vec::new(),
            prefill_attn: None,
            gemv_max_rows: GEMV_DEFAULT_ROWS,
            cuda_graphs: true,
        }
    }
}

impl CudaOptions {
    /// The options from variables looked up by `var` (the binary passes the process environment):
    /// `SERVERBENCH_CUDA_INCLUDE` (one include directory), `SERVERBENCH_PREFILL_ATTN` (`wg` | `mma`),
    /// `SERVERBENCH_GEMV_MAX_ROWS` (0 to 4) and `SERVERBENCH_NO_CUDA_GRAPHS` (set: no graphs). A bad value
    /// is an error naming the variable.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<CudaOptions> {
        Ok(CudaOptions {
            include_dirs: var("SERVERBENCH_CUDA_INCLUDE").into_iter().collect(),
            prefill_attn: var("SERVERBENCH_PREFILL_ATTN").map(|v| v.trim().to_string()),
            gemv_max_rows: parse_gemv_max_rows(var("SERVERBENCH_GEMV_MAX_ROWS").as_deref())?,
            cuda_graphs: var("SERVERBENCH_NO_CUDA_GRAPHS").is_none(),
        })
    }

    /// Where NVRTC looks for the CUDA headers.
    fn include_paths(&self) -> Vec<String> {
        let mut v = self.include_dirs.clone();
        v.push("/usr/local/cuda/include".into());
        v
    }
}

impl Device {
    /// Opens GPU `ordinal`, compiles the kernels for its architecture and creates the cuBLAS handle.
    pub fn open(ordinal: usize, opts: &CudaOptions) -> Result<Device> {
        // cudarc panics when the driver library cannot be loaded; turn that into an error.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let loaded = std::panic::catch_unwind(|| CudaContext::new(ordinal));
        std::panic::set_hook(hook);
        let ctx = loaded.map_err(|_| {
            CudaError::Config("no CUDA driver found (libcuda could not be loaded): the CUDA engine needs an NVIDIA GPU".into())
        })??;
        let (major, minor) = ctx.compute_capability()?;
        let arch: &'static str = match (major, minor) {
            (9, 0) => "compute_90a",
            (8, 9) => "compute_89",
            (8, 6) => "compute_86",
            (8, 0) => "compute_80",
            _ if major >= 10 => "compute_90",
            _ => {
                return Err(CudaError::Config(format!(
                    "compute capability {major}.{minor}: the kernels need 8.0 or later (bf16 tensor cores)"
                )))
            }
        };
        let ptx = compile(arch, &opts.include_paths())?;
        let module = ctx.load_module(ptx)?;
        let kernels = KERNEL_NAMES
            .iter()
            .map(|n| module.load_function(n))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for (name, bytes) in DYNAMIC_SMEM {
            let i = kernel_index(name)?;
            kernels[i].set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )?;
        }
        kernels[kernel_index("gemv_small")?].set_attribute(
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            GEMV_SMEM_MAX as i32,
        )?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
            as u32;
        // A stream of our own: the legacy default stream cannot be captured into a CUDA graph.
        let stream = ctx.new_stream()?;
        let blas = CudaBlas::new(stream.clone())?;
        // cuBLAS gets a workspace it never has to allocate, so GEMMs can be captured into graphs.
        let workspace = stream.alloc_zeros::<u8>(BLAS_WORKSPACE)?;
        {
            let (ptr, _sync) = workspace.device_ptr(&stream);
            // SAFETY: the workspace lives as long as the handle (both are fields of this Device).
            let status = unsafe {
                blas_sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut _, BLAS_WORKSPACE)
            };
            status.result()?;
        }
        let name = ctx.name()?;
        Ok(Device {
            ctx,
            stream,
            blas,
            _blas_workspace: workspace,
            kernels,
            gemv_max_rows: opts.gemv_max_rows,
            prefill_attn: parse_prefill_attn(opts.prefill_attn.as_deref(), arch == "compute_90a")?,
            cuda_graphs: opts.cuda_graphs,
            sms,
            name,
        })
    }

    /// A zeroed buffer of `len` elements.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<Buffer<T>> {
        let slice = self.stream.alloc_zeros::<T>(len.max(1))?;
        let ptr = {
            let (p, _sync) = slice.device_ptr(&self.stream);
            p
        };
        Ok(Buffer { slice, ptr, len })
    }

    /// Copies `host` into `buf` from element `at`.
    pub fn upload<T: DeviceRepr>(&self, host: &[T], buf: &mut Buffer<T>, at: usize) -> Result<()> {
        if at + host.len() > buf.len {
            return Err(CudaError::Config(format!(
                "upload of {} elements into a buffer of {}",
                host.len(),
                buf.len
            )));
        }
        if host.is_empty() {
            return Ok(());
        }
        let mut view = buf.slice.slice_mut(at..at + host.len());
        self.stream.memcpy_htod(host, &mut view)?;
        Ok(())
    }

    /// Copies the first `n` elements of `buf` to the host (waits for the stream).
    pub fn download<T: DeviceRepr + Default + Clone>(
        &self,
        buf: &Buffer<T>,
        n: usize,
    ) -> Result<Vec<T>> {
        let mut out = vec![T::default(); n];
        if n > 0 {
            let view = buf.slice.slice(..n);
            self.stream.memcpy_dtoh(&view, &mut out)?;
        }
        Ok(out)
    }

    /// Launches kernel `name` with `args` (each a device address or a scalar), with the dynamic shared
    /// memory [`DYNAMIC_SMEM`] gives it (none if not listed).
    pub fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<()> {
        let smem = DYNAMIC_SMEM
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, b)| *b);
        self.launch_with_smem(name, grid, block, smem, args)
    }

    /// Launches kernel `name` with `shared_mem_bytes` of dynamic shared memory.
    pub fn launch_with_smem(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        shared_mem_bytes: u32,
        args: &[Arg],
    ) -> Result<()> {
        let i = kernel_index(name)?;
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        let mut b = self.stream.launch_builder(&self.kernels[i]);
        for a in args {
            match a {
                Arg::Ptr(p) => b.arg(p),
                Arg::I32(v) => b.arg(v),
                Arg::I64(v) => b.arg(v),
                Arg::U64(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: (block, 1, 1),
            shared_mem_bytes,
        };
        // SAFETY: every pointer argument is the address of a live buffer of this engine, sized by the
        // caller for the launch's grid; scalars match the kernel's parameter types in order.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Row-major `y[t, n] = x[t, k] · w[n, k]ᵀ` in bf16 with fp32 accumulation (a PyTorch `Linear`).
    /// A few rows (decode) stream the weights through `gemv_small`; more go to cuBLAS.
    pub fn linear(&self, x: u64, w: u64, y: u64, t: u32, n: u32, k: u32) -> Result<()> {
        if t == 0 {
            return Ok(());
        }
        let staged = t * k * 2;
        if t <= self.gemv_max_rows && k % 8 == 0 && staged <= GEMV_SMEM_MAX {
            // As many blocks as fit on the GPU at once (by shared memory, at most 3 per SM), each
            // staging x once; no more than there are groups of 8 rows.
            let per_sm = (220 * 1024 / (staged + 1024)).clamp(1, 3);
            let blocks = n.div_ceil(8).min(self.sms * per_sm);
            let args = [
                Arg::Ptr(x),
                Arg::Ptr(w),
                Arg::Ptr(y),
                Arg::I32(t as i32),
                Arg::I32(n as i32),
                Arg::I32(k as i32),
            ];
            return self.launch_with_smem("gemv_small", (blocks, 1, 1), 256, staged, &args);
        }
        let (alpha, beta) = (1.0f32, 0.0f32);
        // Column-major view: Y (n × t) = Wᵀ (n × k) · X (k × t).
        // SAFETY: x, w and y are live buffers holding t×k, n×k and t×n bf16 elements.
        unsafe {
            blas::gemm_ex(
                *self.blas.handle(),
                blas_sys::cublasOperation_t::CUBLAS_OP_T,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                t as i32,
                k as i32,
                (&alpha) as *const f32 as *const _,
                w as *const _,
                blas_sys::cudaDataType_t::CUDA_R_16BF,
                k as i32,
                x as *const _,
                blas_sys::cudaDataType_t::CUDA_R_16BF,
                k as i32,
                (&beta) as *const f32 as *const _,
                y as *mut _,
                blas_sys::cudaDataType_t::CUDA_R_16BF,
                n as i32,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }?;
        Ok(())
    }

    /// A timing event recorded on the stream now.
    pub fn mark(&self) -> Result<cudarc::driver::CudaEvent> {
        Ok(self
            .stream
            .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?)
    }

    /// Waits for everything queued.
    pub fn sync(&self) -> Result<()> {
        self.stream.synchronize()?;
        Ok(())
    }

    /// Free and total device memory, bytes.
    pub fn memory(&self) -> Result<(usize, usize)> {
        Ok(self.ctx.mem_get_info()?)
    }
}

fn kernel_index(name: &str) -> Result<usize> {
    KERNEL_NAMES
        .iter()
        .position(|n| *n == name)
        .ok_or_else(|| CudaError::Config(format!("no kernel named {name}")))
}

fn parse_gemv_max_rows(value: Option<&str>) -> Result<u32> {
    match value {
        None => Ok(GEMV_DEFAULT_ROWS),
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n <= GEMV_MAX_ROWS => Ok(n),
            _ => Err(CudaError::Config(format!(
                "SERVERBENCH_GEMV_MAX_ROWS={v}: expected a whole number from 0 to {GEMV_MAX_ROWS}"
            ))),
        },
    }
}

/// The prefill attention kernels, by `SERVERBENCH_PREFILL_ATTN` name: `wg` (Hopper's warpgroup MMA with a
/// producer warpgroup; sm_90 only, the default there) and `mma` (`mma.sync`; any GPU the engine runs on,
/// the default elsewhere). Kernel and threads per block.
const PREFILL_ATTN: [(&str, &str, u32); 2] =
    [("wg", "attn_prefill_wg", 384), ("mma", "attn_prefill", 128)];

fn parse_prefill_attn(value: Option<&str>, hopper: bool) -> Result<(&'static str, u32)> {
    let want = value
        .map(str::trim)
        .unwrap_or(if hopper { "wg" } else { "mma" });
    let (_, kernel, threads) = PREFILL_ATTN.iter().find(|k| k.0 == want).ok_or_else(|| {
        CudaError::Config(format!(
            "SERVERBENCH_PREFILL_ATTN={want}: expected wg or mma"
        ))
    })?;
    if want == "wg" && !hopper {
        return Err(CudaError::Config(
            "SERVERBENCH_PREFILL_ATTN=wg: the warpgroup kernel needs an sm_90 GPU (H100, H200); use mma".into(),
        ));
    }
    Ok((kernel, *threads))
}

/// A kernel argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// A device address (0 for a null pointer).
    Ptr(u64),
    /// `int`.
    I32(i32),
    /// `long long`.
    I64(i64),
    /// `unsigned long long`.
    U64(u64),
    /// `float`.
    F32(f32),
}

/// Compiles the kernels to PTX for `arch` (no GPU needed; NVRTC must load).
fn compile(arch: &'static str, include_paths: &[String]) -> Result<cudarc::nvrtc::Ptx> {
    let opts = CompileOptions {
        arch: Some(arch),
        include_paths: include_paths.to_vec(),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    compile_ptx_with_opts(KERNELS, opts).map_err(|e| CudaError::Compile(format!("{e:?}")))
}

/// The kernels' PTX for `arch` (no GPU needed; NVRTC must load).
pub fn compile_kernels(arch: &'static str, opts: &CudaOptions) -> Result<String> {
    Ok(compile(arch, &opts.include_paths())?.to_src())
}

#[cfg(test)]
mod tests {
    /// Compiles the kernels where NVRTC can be loaded (it needs no GPU); says it was skipped otherwise.
    #[test]
    fn kernels_compile_with_nvrtc_when_it_is_installed() {
        for arch in ["compute_90", "compute_90a"] {
            kernels_compile_for(arch);
        }
    }

    /// One architecture of the test above; `SERVERBENCH_PTX_DUMP=DIR` keeps the PTX (for `ptxas -v`).
    fn kernels_compile_for(arch: &'static str) {
        let loaded = std::panic::catch_unwind(|| super::compile_kernels(arch, &Default::default()));
        match loaded {
            Ok(Ok(ptx)) => {
                if let Ok(dir) = std::env::var("SERVERBENCH_PTX_DUMP") {
                    std::fs::write(format!("{dir}/{arch}.ptx"), &ptx).unwrap();
                }
                for k in super::KERNEL_NAMES {
                    assert!(ptx.contains(k), "{k} missing from the PTX");
                }
                assert!(
                    ptx.contains("mma.sync.aligned.m16n8k16"),
                    "the prefill attention uses tensor cores"
                );
                if arch == "compute_90a" {
                    assert!(ptx.contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"));
                    assert!(ptx.contains("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"));
                }
            }
            Ok(Err(e)) => panic!("the kernels do not compile: {e}"),
            Err(_) => eprintln!(
                "skipped: NVRTC is not installed on this machine (no CUDA libraries to load)"
            ),
        }
    }

    /// The GEMV switch defaults to one row, takes 0 to 4, and names the variable when it is bad.
    #[test]
    fn gemv_row_limit_parses_its_environment_variable() {
        assert_eq!(super::parse_gemv_max_rows(None).unwrap(), 1);
        assert_eq!(super::parse_gemv_max_rows(Some("0")).unwrap(), 0);
        assert_eq!(super::parse_gemv_max_rows(Some(" 4")).unwrap(), 4);
        for bad in ["5", "-1", "two", ""] {
            let e = super::parse_gemv_max_rows(Some(bad))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("SERVERBENCH_GEMV_MAX_ROWS") && e.contains("0 to 4"),
                "{e}"
            );
        }
    }

    /// The prefill attention defaults to the warpgroup kernel on Hopper only, takes either name, and
    /// names the variable and the choices when the value is bad or the GPU cannot run it.
    #[test]
    fn prefill_attention_kernel_follows_the_gpu_and_its_environment_variable() {
        use super::parse_prefill_attn as pick;
        assert_eq!(pick(None, true).unwrap(), ("attn_prefill_wg", 384));
        assert_eq!(pick(None, false).unwrap(), ("attn_prefill", 128));
        assert_eq!(pick(Some(" mma"), true).unwrap(), ("attn_prefill", 128));
        let e = pick(Some("wg"), false).unwrap_err().to_string();
        assert!(
            e.contains("SERVERBENCH_PREFILL_ATTN") && e.contains("sm_90"),
            "{e}"
        );
        let e = pick(Some("flash"), true).unwrap_err().to_string();
        assert!(
            e.contains("SERVERBENCH_PREFILL_ATTN=flash") && e.contains("wg or mma"),
            "{e}"
        );
    }

    /// The shared-memory sizes the host asks for are the ones the kernels' tile shapes need.
    #[test]
    fn dynamic_shared_memory_matches_the_kernels_tile_shapes() {
        for line in [
            "#define KS (HD + 8)",
            "#define HD 128",
            "#define DCH 64",
            "#define BK 32",
            "#define PU 8  // units per block",
            "#define DEC_SMEM ((4 * DCH + 16) * KS * 2)",
            "#define PF_SMEM ((4 * BK + PU * 16) * KS * 2)",
            "#define GV_MAXT 4",
            "#define WBK 64",
            "#define WST 4",
            "#define WTILE (WBK * HD * 2)",
            "#define WQ (64 * HD * 2)",
            "#define WG_SMEM (1024 + 2 * WQ + WST * 2 * WTILE + 2 * WST * 8)",
        ] {
            assert!(super::KERNELS.contains(line), "kernels.cu lost `{line}`");
        }
        assert_eq!(super::DYNAMIC_SMEM[0].1, (4 * 64 + 16) * 136 * 2);
        assert_eq!(super::DYNAMIC_SMEM[1].1, (4 * 32 + 8 * 16) * 136 * 2);
        assert_eq!(
            super::DYNAMIC_SMEM[2].1,
            1024 + 2 * 16384 + 4 * 2 * 16384 + 64
        );
        assert_eq!(crate::batch::PREFILL_BLOCK_UNITS, 8);
        assert_eq!(super::GEMV_MAX_ROWS, 4);
    }
}
