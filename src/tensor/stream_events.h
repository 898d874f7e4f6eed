// Events on a runtime's streams, for the GPU backends' caching allocators
// (device_allocator.h, pinned_allocator.h): a block some stream may still
// use is handed out again only once an event recorded there is done.
#pragma once

namespace qk {

class StreamEvents {
 public:
  virtual ~StreamEvents() = default;
  // A marker after the work queued so far on `stream` (the runtime's handle);
  // event_done says whether the device has passed it.
  virtual void* record_event(void* stream) = 0;
  virtual bool event_done(void* event) = 0;
  virtual void destroy_event(void* event) = 0;
};

}  // namespace qk
