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

const KERNEL_NAMES: [&str; 9] = [
    "gather_rows",
    "add_rmsnorm",
    "qk_norm_rope_store",
    "swiglu",
    "attn_decode_partial",
    "attn_decode_reduce",
    "attn_prefill",
    "argmax_rows",
    "fill_random",
];

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
    /// Device name.
    pub name: String,
}

/// Bytes of cuBLAS workspace (Hopper's cuBLAS asks for up to 32 MiB).
const BLAS_WORKSPACE: usize = 32 << 20;

/// Where the CUDA headers NVRTC needs are looked for (`SERVERBENCH_CUDA_INCLUDE` first).
fn include_paths() -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(p) = std::env::var("SERVERBENCH_CUDA_INCLUDE") {
        v.push(p);
    }
    v.push("/usr/local/cuda/include".into());
    v
}

impl Device {
    /// Opens GPU `ordinal`, compiles the kernels for its architecture and creates the cuBLAS handle.
    pub fn open(ordinal: usize) -> Result<Device> {
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
            (9, 0) => "compute_90",
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
        let ptx = compile(arch)?;
        let module = ctx.load_module(ptx)?;
        let kernels = KERNEL_NAMES
            .iter()
            .map(|n| module.load_function(n))
            .collect::<std::result::Result<Vec<_>, _>>()?;
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

    /// Launches kernel `name` with `args` (each a device address or a scalar).
    pub fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<()> {
        let i = KERNEL_NAMES
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| CudaError::Config(format!("no kernel named {name}")))?;
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
            shared_mem_bytes: 0,
        };
        // SAFETY: every pointer argument is the address of a live buffer of this engine, sized by the
        // caller for the launch's grid; scalars match the kernel's parameter types in order.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Row-major `y[t, n] = x[t, k] · w[n, k]ᵀ` in bf16 with fp32 accumulation (a PyTorch `Linear`).
    pub fn linear(&self, x: u64, w: u64, y: u64, t: u32, n: u32, k: u32) -> Result<()> {
        if t == 0 {
            return Ok(());
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
fn compile(arch: &'static str) -> Result<cudarc::nvrtc::Ptx> {
    let opts = CompileOptions {
        arch: Some(arch),
        include_paths: include_paths(),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    compile_ptx_with_opts(KERNELS, opts).map_err(|e| CudaError::Compile(format!("{e:?}")))
}

/// The kernels' PTX for `arch` (no GPU needed; NVRTC must load).
pub fn compile_kernels(arch: &'static str) -> Result<String> {
    Ok(compile(arch)?.to_src())
}

#[cfg(test)]
mod tests {
    /// Compiles the kernels where NVRTC can be loaded (it needs no GPU); says it was skipped otherwise.
    #[test]
    fn kernels_compile_with_nvrtc_when_it_is_installed() {
        let loaded = std::panic::catch_unwind(|| super::compile_kernels("compute_90"));
        match loaded {
            Ok(Ok(ptx)) => {
                for k in super::KERNEL_NAMES {
                    assert!(ptx.contains(k), "{k} missing from the PTX");
                }
                assert!(
                    ptx.contains("mma.sync.aligned.m16n8k16"),
                    "the prefill attention uses tensor cores"
                );
            }
            Ok(Err(e)) => panic!("the kernels do not compile: {e}"),
            Err(_) => eprintln!(
                "skipped: NVRTC is not installed on this machine (no CUDA libraries to load)"
            ),
        }
    }
}
