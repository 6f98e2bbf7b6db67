// ImageFolder: JPEG decoding (libjpeg-turbo), crops, flips and normalisation on the CPU.
#include <nn/data.h>
#include <nn/random.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "data/folder.h"
#include "kernels/philox.h"

#ifdef LIBNN_HAVE_JPEG
#include <jpeglib.h>
// after jpeglib.h, which it needs
#include <jerror.h>

#include <csetjmp>
#endif

namespace nn::data {

namespace fs = std::filesystem;

namespace detail {
CropBox random_resized_crop(int W, int H, uint64_t key, uint64_t block) {
  const double area = double(W) * H, lo = std::log(3.0 / 4), hi = std::log(4.0 / 3);
  for (int attempt = 0; attempt < 10; ++attempt) {
    float u[4];
    rng::uniform4(key ^ (uint64_t(attempt) << 56), block, u);
    const double target = area * (0.08 + 0.92 * double(u[0]));
    const double ratio = std::exp(lo + (hi - lo) * double(u[1]));
    const int64_t w = std::llround(std::sqrt(target * ratio)), h = std::llround(std::sqrt(target / ratio));
    if (w > 0 && h > 0 && w <= W && h <= H) {
      const int64_t x0 = std::min<int64_t>(W - w, int64_t(double(u[2]) * double(W - w + 1)));
      const int64_t y0 = std::min<int64_t>(H - h, int64_t(double(u[3]) * double(H - h + 1)));
      return {double(x0), double(y0), double(w), double(h)};
    }
  }
  int64_t w = W, h = H;  // the centre crop, its ratio clamped to [3/4, 4/3]
  if (double(W) / H < 3.0 / 4) h = std::llround(W / (3.0 / 4));
  else if (double(W) / H > 4.0 / 3) w = std::llround(H * (4.0 / 3));
  return {double((W - w) / 2), double((H - h) / 2), double(w), double(h)};
}

int scale_denom(int side, int min_side) {
  for (int d : {8, 4, 2})
    if (side / d >= min_side) return d;
  return 1;
}
}  // namespace detail

bool have_jpeg() {
#ifdef LIBNN_HAVE_JPEG
  return true;
#else
  return false;
#endif
}

namespace {
struct Image {
  int w = 0, h = 0;            // as decoded
  int full_w = 0, full_h = 0;  // the file's own size
  double scale = 1;            // decoded pixels per file pixel (1/8 to 1)
  std::vector<uint8_t> rgb;    // h * w * 3
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
// Warnings: a file that ends early is an error (libjpeg would fill the rest with gray, where
// PIL refuses a truncated image); the others (extraneous bytes before a marker, common in
// photo collections and accepted by PIL too) are ignored, not printed.
void on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error(cinfo);
}
// Errors become a longjmp to `err.jump`, which the caller has set.
void catch_errors(jpeg_error_mgr*& slot, ErrorMgr& err) {
  slot = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
}

// Decodes at the libjpeg scale 1/d that `denom(width, height)` picks from the file's own
// size (the crop is drawn first, so a small crop of a large photo keeps its detail): most of
// the decoding cost of large photos, saved. A file of more than max_pixels (> 0) is refused.
template <typename Denom>
Image decode(const std::string& path, int64_t max_pixels, Denom denom) {
  FILE* f = std::fopen(path.c_str(), "rb");
  NN_CHECK(f, "cannot open image '", path, "'");
  // A PNG under a JPEG name (ImageNet's training set holds one, n02105855_2933.JPEG): said
  // so, where libjpeg would only say "Not a JPEG file".
  static constexpr unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  unsigned char magic[8] = {};
  const bool png = std::fread(magic, 1, 8, f) == 8 && std::equal(magic, magic + 8, kPng);
  if (png) {
    std::fclose(f);
    NN_ERROR("'", path, "' is a PNG file, not a JPEG (ImageNet's training set holds one such "
             "file, n02105855_2933.JPEG): re-encode it as a JPEG under the same name");
  }
  std::rewind(f);
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  catch_errors(cinfo.err, err);
  Image img;
  std::vector<uint8_t> cmyk;  // one row, for CMYK files
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    std::fclose(f);
    NN_ERROR("cannot decode JPEG '", path, "': ", err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_stdio_src(&cinfo, f);
  jpeg_read_header(&cinfo, TRUE);
  // libjpeg converts YCbCr and grayscale to RGB, not CMYK (print-ready photos): those are
  // read as CMYK and converted below, as PIL does.
  const bool is_cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = is_cmyk ? JCS_CMYK : JCS_RGB;
  img.full_w = int(cinfo.image_width);
  img.full_h = int(cinfo.image_height);
  if (max_pixels > 0 && int64_t(img.full_w) * img.full_h > max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    std::fclose(f);
    NN_ERROR("JPEG '", path, "' is ", img.full_w, " x ", img.full_h, " = ",
             int64_t(img.full_w) * img.full_h, " pixels, more than the limit of ", max_pixels,
             " (a decompression bomb, or a photo to shrink first; the limit is "
             "ImageFolderOptions::max_pixels, resnet50_train's --max-image-pixels)");
  }
  cinfo.scale_num = 1;
  cinfo.scale_denom = unsigned(denom(img.full_w, img.full_h));
  jpeg_start_decompress(&cinfo);
  img.w = int(cinfo.output_width);
  img.h = int(cinfo.output_height);
  // (not w / full_w: a partial last block rounds the decoded size up, ceil(W / d))
  img.scale = double(cinfo.scale_num) / double(cinfo.scale_denom);
  img.rgb.resize(size_t(img.w) * img.h * 3);
  if (is_cmyk) cmyk.resize(size_t(img.w) * 4);
  // Adobe's files (nearly all CMYK JPEGs) store the inks inverted
  const bool inverted = cinfo.saw_Adobe_marker;
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t* dst = img.rgb.data() + size_t(cinfo.output_scanline) * img.w * 3;
    JSAMPROW row = is_cmyk ? cmyk.data() : dst;
    jpeg_read_scanlines(&cinfo, &row, 1);
    if (!is_cmyk) continue;
    for (int x = 0; x < img.w; ++x) {
      const uint8_t* p = &cmyk[size_t(x) * 4];
      const int k = inverted ? p[3] : 255 - p[3];  // (255 - K): the light the black ink lets through
      for (int c = 0; c < 3; ++c)
        dst[size_t(x) * 3 + c] = uint8_t(((inverted ? p[c] : 255 - p[c]) * k + 127) / 255);
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  std::fclose(f);
  return img;
}
#endif

// One output pixel's taps along an axis: input indices (clamped to the image, so the edge
// repeats) and normalised weights of a triangle filter. Enlarging, the triangle spans one
// input pixel each side (bilinear); shrinking by s > 1 it spans s, so every input pixel
// counts, as PIL's (and torchvision's) antialiased resize does, instead of aliasing.
struct Taps {
  std::vector<int> first;  // output pixel o's taps are idx/w[first[o] .. first[o + 1])
  std::vector<int> idx;
  std::vector<double> w;
};
Taps filter_taps(double start, double extent, int size, int limit) {
  Taps t;
  const double scale = extent / size, support = std::max(1.0, scale);
  for (int o = 0; o < size; ++o) {
    const double center = start + (o + 0.5) * scale - 0.5;  // in input pixel indices
    const int lo = int(std::floor(center - support)) + 1, hi = int(std::ceil(center + support)) - 1;
    t.first.push_back(int(t.idx.size()));
    double sum = 0;
    for (int i = lo; i <= hi; ++i) {
      const double w = 1.0 - std::abs(i - center) / support;
      if (w <= 0) continue;
      t.idx.push_back(std::clamp(i, 0, limit - 1));
      t.w.push_back(w);
      sum += w;
    }
    for (int k = t.first.back(); k < int(t.idx.size()); ++k) t.w[size_t(k)] /= sum;
  }
  t.first.push_back(int(t.idx.size()));
  return t;
}

// Resample of the crop (x0, y0, cw, ch) of img to size x size (bilinear, antialiased when
// shrinking), flipped if asked, normalised, into out (3, size, size).
void crop_resize(const Image& img, double x0, double y0, double cw, double ch, int size, bool flip,
                 float* out) {
  static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  const Taps tx = filter_taps(x0, cw, size, img.w), ty = filter_taps(y0, ch, size, img.h);
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      const int xs = flip ? size - 1 - x : x;
      double v[3] = {0, 0, 0};
      for (int a = ty.first[size_t(y)]; a < ty.first[size_t(y) + 1]; ++a) {
        const uint8_t* row = img.rgb.data() + size_t(ty.idx[size_t(a)]) * img.w * 3;
        double r[3] = {0, 0, 0};
        for (int b = tx.first[size_t(xs)]; b < tx.first[size_t(xs) + 1]; ++b)
          for (int c = 0; c < 3; ++c) r[c] += tx.w[size_t(b)] * row[size_t(tx.idx[size_t(b)]) * 3 + c];
        for (int c = 0; c < 3; ++c) v[c] += ty.w[size_t(a)] * r[c];
      }
      for (int c = 0; c < 3; ++c)
        out[(size_t(c) * size + y) * size + x] = (float(v[c] / 255.0) - mean[c]) / stdv[c];
    }
  }
}
}  // namespace

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions opts) : opts_(opts) {
  NN_CHECK(have_jpeg(), "ImageFolder: libnn was built without JPEG support (install "
           "libjpeg-dev and reconfigure)");
  NN_CHECK(opts.size > 0, "ImageFolder: size must be positive");
  NN_CHECK(opts.max_pixels >= 0, "ImageFolder: max_pixels must be 0 (no limit) or positive, got ",
           opts.max_pixels);
  detail::check_folder(root, "image folder");
  // Every class must hold an image (as torchvision's ImageFolder demands).
  auto is_jpeg = [](const std::string& name) {
    std::string ext = fs::path(name).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    return ext == ".jpg" || ext == ".jpeg";
  };
  try {
    classes_ = detail::sorted_names(root, true);
    NN_CHECK(!classes_.empty(), "image folder '", root, "' has no class folders");
    for (size_t c = 0; c < classes_.size(); ++c) {
      const fs::path dir = fs::path(root) / classes_[c];
      const std::vector<std::string> names = detail::sorted_names(dir, false, is_jpeg);
      NN_CHECK(!names.empty(), "image folder '", root, "': class folder '", classes_[c],
               "' holds no .jpg/.jpeg files");
      for (auto& n : names) files_.emplace_back((dir / n).string(), int64_t(c));
    }
  } catch (const fs::filesystem_error& e) {
    NN_ERROR("image folder '", root, "' cannot be read: ", e.what());
  }
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
      NN_CHECK(index >= 0 && index < int64_t(files_.size()), "ImageFolder: index ", index,
               " out of range for ", files_.size(), " images");
      const auto& [path, label] = files_[size_t(index)];
      labels[size_t(i)] = label;
      // counter-based randomness: (seed, epoch, image) -> the same crop on every run
      const uint64_t block = (uint64_t(epoch) << 40) | uint64_t(index);
      float f[4];
      rng::uniform4(opts_.seed ^ 0xF11Full, block, f);
      detail::CropBox box{};
      // the box in the file's own pixels, then the decoding scale that keeps its shorter side
      // at least S (training) or the image's shorter side at least S * 8/7 (evaluation: that
      // side to S * 8/7, then the centre S x S)
      Image img = decode(path, opts_.max_pixels, [&](int W, int H) {
        if (opts_.train) {
          box = detail::random_resized_crop(W, H, opts_.seed ^ 0xC0FFEEull, block);
          return detail::scale_denom(int(std::min(box.w, box.h)), int(S));
        }
        const double side = double(std::min(W, H)) * 7 / 8;  // S of the S * 8/7 side, in pixels
        box = {(W - side) / 2, (H - side) / 2, side, side};
        return detail::scale_denom(std::min(W, H), int(S * 8 / 7));
      });
      const double s = img.scale;
      float* out = data.data() + size_t(i) * 3 * S * S;
      crop_resize(img, box.x0 * s, box.y0 * s, box.w * s, box.h * s, int(S),
                  opts_.train && f[0] < 0.5f, out);
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
  // JPEG's limit on a side is 65535 (libjpeg's, 65500)
  NN_CHECK(rgb.size(0) > 0 && rgb.size(1) > 0 && rgb.size(0) <= 65500 && rgb.size(1) <= 65500,
           "write_jpeg: a JPEG's sides must be 1 to 65500 pixels, got ", shape_str(rgb.shape()));
  FILE* f = std::fopen(path.c_str(), "wb");
  NN_CHECK(f, "write_jpeg: cannot create '", path, "'");
  jpeg_compress_struct cinfo;
  ErrorMgr err;
  catch_errors(cinfo.err, err);
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    std::fclose(f);
    NN_ERROR("write_jpeg: cannot write '", path, "': ", err.message);
  }
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
  NN_CHECK(std::fclose(f) == 0, "write_jpeg: cannot write '", path, "'");
#else
  NN_ERROR("write_jpeg: libnn was built without JPEG support");
#endif
}

}  // namespace nn::data
