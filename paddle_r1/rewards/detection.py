"""Detection rewards via pycocotools: mAP, AP50, mask IoU."""
