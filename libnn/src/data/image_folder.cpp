// ImageFolder: JPEG decoding (libjpeg-turbo), crops, flips and normalisation on the CPU.
#include <nn/data.h>
#include <nn/random.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "kernels/philox.h"

#ifdef LIBNN_HAVE_JPEG
#include <jpeglib.h>

#include <csetjmp>
#endif

namespace nn::data {

namespace fs = std::filesystem;

bool have_jpeg() {
#ifdef LIBNN_HAVE_JPEG
  return true;
#else
  return false;
#endif
}

namespace {
struct Image {
  int w = 0, h = 0;
  std::vector<uint8_t> rgb;  // h * w * 3
};

#ifdef LIBNN_HAVE_JPEG
// libjpeg reports errors through a callback; longjmp back so a bad file becomes an nn::Error.
struct ErrorMgr {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};
void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  longjmp(e->jump, 1);
}

// Decodes at the largest libjpeg scale (1/1, 1/2, 1/4, 1/8) that keeps the shorter side at
// least `min_side`: most of the decoding cost of large photos, saved.
Image decode(const std::string& path, int min_side) {
  FILE* f = std::fopen(path.c_str(), "rb");
  NN_CHECK(f, "cannot open image '", path, "'");
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  Image img;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    std::fclose(f);
    NN_ERROR("cannot decode JPEG '", path, "': ", err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_stdio_src(&cinfo, f);
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  const int shorter = int(std::min(cinfo.image_width, cinfo.image_height));
  cinfo.scale_num = 1;
  cinfo.scale_denom = 1;
  for (int d : {8, 4, 2})
    if (shorter / d >= min_side) {
      cinfo.scale_denom = d;
      break;
    }
  jpeg_start_decompress(&cinfo);
  img.w = int(cinfo.output_width);
  img.h = int(cinfo.output_height);
  img.rgb.resize(size_t(img.w) * img.h * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = img.rgb.data() + size_t(cinfo.output_scanline) * img.w * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  std::fclose(f);
  return img;
}
#endif

// Bilinear resample of the crop (x0, y0, cw, ch) of img to size x size, flipped if asked,
// normalised, into out (3, size, size).
void crop_resize(const Image& img, double x0, double y0, double cw, double ch, int size, bool flip,
                 float* out) {
  static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  for (int y = 0; y < size; ++y) {
    double sy = y0 + (y + 0.5) * ch / size - 0.5;
    int iy = int(std::floor(sy));
    double fy = sy - iy;
    int y1 = std::clamp(iy, 0, img.h - 1), y2 = std::clamp(iy + 1, 0, img.h - 1);
    for (int x = 0; x < size; ++x) {
      int xs = flip ? size - 1 - x : x;
      double sx = x0 + (xs + 0.5) * cw / size - 0.5;
      int ix = int(std::floor(sx));
      double fx = sx - ix;
      int x1 = std::clamp(ix, 0, img.w - 1), x2 = std::clamp(ix + 1, 0, img.w - 1);
      for (int c = 0; c < 3; ++c) {
        auto px = [&](int yy, int xx) { return double(img.rgb[(size_t(yy) * img.w + xx) * 3 + c]); };
        double v = (1 - fy) * ((1 - fx) * px(y1, x1) + fx * px(y1, x2)) +
                   fy * ((1 - fx) * px(y2, x1) + fx * px(y2, x2));
        out[(size_t(c) * size + y) * size + x] = (float(v / 255.0) - mean[c]) / stdv[c];
      }
    }
  }
}
}  // namespace

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions opts) : opts_(opts) {
  NN_CHECK(have_jpeg(), "ImageFolder: libnn was built without JPEG support (install "
           "libjpeg-dev and reconfigure)");
  NN_CHECK(opts.size > 0, "ImageFolder: size must be positive");
  NN_CHECK(fs::is_directory(root), "image folder '", root, "' does not exist");
  for (auto& e : fs::directory_iterator(root))
    if (e.is_directory()) classes_.push_back(e.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  NN_CHECK(!classes_.empty(), "image folder '", root, "' has no class folders");
  for (size_t c = 0; c < classes_.size(); ++c) {
    std::vector<std::string> names;
    for (auto& e : fs::directory_iterator(fs::path(root) / classes_[c])) {
      std::string ext = e.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
      if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) names.push_back(e.path().string());
    }
    std::sort(names.begin(), names.end());
    for (auto& n : names) files_.emplace_back(n, int64_t(c));
  }
  NN_CHECK(!files_.empty(), "image folder '", root, "' holds no .jpg/.jpeg files");
}

Batch ImageFolder::get_epoch_batch(const std::vector<int64_t>& indices, int64_t epoch) const {
#ifdef LIBNN_HAVE_JPEG
  const int64_t n = int64_t(indices.size()), S = opts_.size;
  std::vector<float> data(static_cast<size_t>(n * 3 * S * S));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < n; ++i) {
    try {
      const int64_t index = indices[size_t(i)];
      const auto& [path, label] = files_.at(size_t(index));
      labels[size_t(i)] = label;
      // counter-based randomness: (seed, epoch, image) -> the same crop on every run
      const uint64_t block = (uint64_t(epoch) << 40) | uint64_t(index);
      float u[4], f[4];
      rng::uniform4(opts_.seed ^ 0xC0FFEEull, block, u);
      rng::uniform4(opts_.seed ^ 0xF11Full, block, f);
      Image img = decode(path, int(opts_.train ? S : S * 8 / 7));
      float* out = data.data() + size_t(i) * 3 * S * S;
      if (opts_.train) {
        const double area = double(img.w) * img.h;
        double target = area * (0.08 + 0.92 * u[0]);
        double ratio = std::exp(std::log(3.0 / 4) + (std::log(4.0 / 3) - std::log(3.0 / 4)) * u[1]);
        double cw = std::min<double>(img.w, std::sqrt(target * ratio));
        double ch = std::min<double>(img.h, std::sqrt(target / ratio));
        double x0 = (img.w - cw) * u[2], y0 = (img.h - ch) * u[3];
        crop_resize(img, x0, y0, cw, ch, int(S), f[0] < 0.5f, out);
      } else {
        // shorter side to S * 8/7, then the centre S x S
        const double scale = double(S) * 8 / 7 / std::min(img.w, img.h);
        const double cw = S / scale, ch = S / scale;
        crop_resize(img, (img.w - cw) / 2, (img.h - ch) / 2, cw, ch, int(S), false, out);
      }
    } catch (const std::exception& e) {
      errors[size_t(i)] = e.what();
    }
  }
  for (auto& e : errors) NN_CHECK(e.empty(), e);
  return {from_vector(data, {n, 3, S, S}), from_vector(labels, {n})};
#else
  NN_ERROR("ImageFolder: libnn was built without JPEG support");
#endif
}

void write_jpeg(const std::string& path, const Tensor& rgb_in, int quality) {
#ifdef LIBNN_HAVE_JPEG
  Tensor rgb = rgb_in.detach().cpu().contiguous();
  NN_CHECK(rgb.dtype() == kU8 && rgb.dim() == 3 && rgb.size(2) == 3,
           "write_jpeg: expected u8 (H, W, 3), got ", dtype_name(rgb.dtype()), " ", shape_str(rgb.shape()));
  FILE* f = std::fopen(path.c_str(), "wb");
  NN_CHECK(f, "write_jpeg: cannot create '", path, "'");
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = JDIMENSION(rgb.size(1));
  cinfo.image_height = JDIMENSION(rgb.size(0));
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const auto* p = static_cast<const uint8_t*>(rgb.data_ptr());
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(p + size_t(cinfo.next_scanline) * cinfo.image_width * 3);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
#else
  NN_ERROR("write_jpeg: libnn was built without JPEG support");
#endif
}

}  // namespace nn::data
